package engine_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// fleetPolicy shares 100 requests per second between gold (weight 3) and
// free (weight 1).
const fleetPolicy = `
domain: f
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant, weights: {gold: 3, free: 1}}
    rate_limit: {unit: second, requests_per_unit: 100}
`

const (
	fleetLimit  = 100
	fleetWindow = time.Second
	// fleetRounds is the requests each tenant sends per window: four times
	// the limit, so both saturate it.
	fleetRounds  = 4 * fleetLimit
	fleetWindows = 6
)

// fleetCase places two tenants' requests on a fleet of sidecars (engines)
// sharing one store, and bounds the steady gold:free admission ratio.
type fleetCase struct {
	name    string
	engines int
	// place is the engine that serves tenant k's (0 gold, 1 free) request of
	// round i.
	place    func(k, i int) int
	min, max float64 // bounds of gold:free over the steady windows
}

// spread sends the requests of round i round-robin over n engines, the two
// tenants' to different ones.
func spread(n int) func(k, i int) int { return func(k, i int) int { return (i + k) % n } }

// fleetCases: the weights hold within one sidecar, not across sidecars. Each
// sidecar's escrow splits the budget it can reach — its own admissions plus
// what the store last said remains for the whole fleet — among the tenants
// it sees. Early in a window that is nearly the whole limit L, so on each of
// n sidecars free is admitted as fast as it asks until its admissions there
// pass a quarter of (that sidecar's admissions + the fleet's remaining), at
// about L/(n+1) admitted per sidecar; gold takes the rest. Free ends with
// about n/(2(n+1))·L, gold:free ≈ (n+2)/n: 3 on one sidecar, 2 on two, 1.5
// on four, 1.25 on eight (at a limit of 1000 we measured 1.97, 1.49 and
// 1.28; at this limit of 100, leased in quanta of 5, the values noted
// below). A sidecar that sees one tenant lends it the idle tenant's share in
// full, so pinned tenants split by arrival: 1:1 here. The bounds document
// this per-sidecar behaviour: a fleet-wide split would move them all to 3.
var fleetCases = []fleetCase{
	{"one engine of 4", 4, func(k, i int) int { return 0 }, 2.9, 3.1},           // 75:25
	{"pinned, one engine each", 4, func(k, i int) int { return k }, 0.95, 1.05}, // 50:50
	{"spread over 2", 2, spread(2), 1.7, 2.3},                                   // 67:33
	{"spread over 4", 4, spread(4), 1.2, 1.7},                                   // 57:43
	{"spread over 8", 8, spread(8), 1.1, 1.45},                                  // 55:45
}

// runFleet runs c from begin through fleetWindows windows on engines sharing
// store. In each window both tenants ask fleetRounds times, interleaved and
// evenly spaced in time. It checks every window's fleet total (at most the
// limit; from the second window, at least the limit less the budget each
// engine may strand, a lease quantum of limit/20) and the gold:free ratio
// over the windows after the first, where each tenant's demand seen includes
// the previous window's (the first splits by arrival: 50:50).
func runFleet(t *testing.T, c fleetCase, store gale.Store, begin time.Time) {
	engines := make([]*engine.Engine, c.engines)
	for i := range engines {
		engines[i] = newEngine(t, store, map[string]string{"f.yaml": fleetPolicy})
	}
	tenants := []string{"gold", "free"}
	var steady [2]int
	for w := range fleetWindows {
		start := begin.Add(time.Duration(w) * fleetWindow)
		var admitted [2]int
		for i := range fleetRounds {
			now := start.Add(time.Duration(i) * fleetWindow / fleetRounds)
			for k, tenant := range tenants {
				if decide(t, engines[c.place(k, i)], req("f", "tenant="+tenant), now).Code == engine.CodeOK {
					admitted[k]++
				}
			}
		}
		total := admitted[0] + admitted[1]
		if total > fleetLimit {
			t.Fatalf("window %d: the fleet admitted %d > limit %d", w, total, fleetLimit)
		}
		if floor := fleetLimit - c.engines*fleetLimit/20; w > 0 && total < floor {
			t.Errorf("window %d: the fleet admitted %d < %d of a saturated limit of %d", w, total, floor, fleetLimit)
		}
		if w > 0 {
			steady[0] += admitted[0]
			steady[1] += admitted[1]
		}
	}
	ratio := float64(steady[0]) / float64(max(steady[1], 1))
	t.Logf("%d engines: gold %d, free %d over %d windows: %.2f:1", c.engines, steady[0], steady[1], fleetWindows-1, ratio)
	if ratio < c.min || ratio > c.max {
		t.Errorf("gold:free = %.2f, want %.2f..%.2f", ratio, c.min, c.max)
	}
}

// TestFairnessAcrossAFleet: sidecars sharing one store hold the fleet to the
// limit in every window, but weight tenants only among the requests each one
// sees (fleetCases): 3:1 within one sidecar, 1:1 with each tenant pinned to
// its own, and about (n+2)/n with both spread over n.
func TestFairnessAcrossAFleet(t *testing.T) {
	for _, c := range fleetCases {
		t.Run(c.name, func(t *testing.T) { runFleet(t, c, memstore.New(), t0) })
	}
}

// TestFairnessAcrossAFleetRedis is TestFairnessAcrossAFleet on a real
// redis-server, the store a fleet shares in production.
func TestFairnessAcrossAFleetRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := testenv.StartRedis(t)
	// Redis expires keys on its own clock, at the window's end: the timeline
	// must lie ahead of it or a counter is gone as soon as it is written.
	begin := time.Now().Add(48 * time.Hour).Truncate(24 * time.Hour)
	for n, c := range fleetCases {
		t.Run(c.name, func(t *testing.T) {
			// The test judges admissions, not latency: a round trip a
			// loaded machine stalls must not fail it (testenv.StoreDeadline).
			store, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			// Each case in windows of its own: no counter of an earlier case
			// is still open.
			runFleet(t, c, store, begin.Add(time.Duration(n)*time.Minute))
		})
	}
}
