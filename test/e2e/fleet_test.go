package e2e

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// fleetChart, when set, is the directory TestE2EFleetGate writes its chart
// (fleet-gate.png) and samples (fleet-gate-*.csv) into: `make fleet-chart`.
var fleetChart = flag.String("fleet-chart", "", "directory for TestE2EFleetGate's chart and samples")

// The fleet scenario. A backend of true capacity fleetC serves each request
// in fleetBase while at most fleetC are in flight, and slows as
// (n/fleetC)² past it, where n counts the requests in flight at arrival:
// past its capacity, work queues. Four sidecars gate it; each has
// fleetWorkers closed-loop clients, together four times the capacity.
const (
	fleetC       = 12
	fleetBase    = 100 * time.Millisecond
	fleetSize    = 4
	fleetWorkers = 12
	// fleetHeartbeat is the distributed gate's heartbeat; its lease is the
	// default, two heartbeats.
	fleetHeartbeat = 200 * time.Millisecond
	fleetLease     = 2 * fleetHeartbeat
	// fleetWarm is how long the load runs before the ceiling is judged;
	// fleetSteady how long it is then sampled.
	fleetWarm   = 8 * time.Second
	fleetSteady = 6 * time.Second
	sampleEvery = 10 * time.Millisecond
	// fleetRetry is how long a refused client waits before it asks again:
	// Envoy's default retry base interval. Shorter, the refused clients'
	// calls spin the two cores the sidecars and the backend share, and the
	// latency the gates infer from is mostly scheduling.
	fleetRetry = 25 * time.Millisecond
)

// fleetGatePolicy is the gate every sidecar runs: a p95 controller whose
// target, 1.5 × the backend's base latency, is reached at about 1.2 × its
// capacity, with the floor and start an operator sizes for the backend
// (C/2 and 2C/3: one sidecar in front of it may always send that many).
// coordinator is "" for independent sidecars: then each sidecar applies
// the floor and the start on its own, and the fleet's are four times them.
func fleetGatePolicy(coordinator string) string {
	p := fmt.Sprintf(`
concurrency:
  - name: backend
    match: {path_prefix: /}
    controller: p95
    min_limit: %d
    max_limit: 64
    initial_limit: %d
    params: {target: %v, tolerance: 0.15, window: 500ms, min_samples: 5, tick: 100ms, increase_step: 1, decrease_factor: 0.8}
`, fleetC/2, fleetC*2/3, 3*fleetBase/2)
	if coordinator != "" {
		p += fmt.Sprintf("    distributed: {coordinator: %s, heartbeat: %v, acknowledged_handoff: true}\n", coordinator, fleetHeartbeat)
	}
	return p
}

// capacityBackend is a real HTTP server of capacity c (see fleetC). It
// counts the requests in it: the fleet's true total in flight.
type capacityBackend struct {
	srv      *httptest.Server
	inflight atomic.Int64
}

func newCapacityBackend(t *testing.T, c int, base time.Duration) *capacityBackend {
	b := &capacityBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		d := base
		if over := float64(n) / float64(c); over > 1 {
			d = time.Duration(float64(base) * over * over)
		}
		select { // the backend's service time, not a test pause
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// fleetSample is one instant of a run.
type fleetSample struct {
	at       time.Duration // since the load started
	inflight int           // in the backend
	global   int           // L_global by the coordinator's live records; 0 without one
	shares   int           // Σ share of the live records
	live     int
}

// fleetRun is what one run measured.
type fleetRun struct {
	name    string
	samples []fleetSample
	killAt  time.Duration // when a sidecar was killed; 0: none
	// deadEnd is when the killed sidecar's lease ended (its record's
	// expiry, as last read); handoff when the survivors' shares added up to
	// L_global. Both since the load started.
	deadEnd, handoff time.Duration
	calls            atomic.Int64
	refused          atomic.Int64
	failed           atomic.Int64
}

// records reads a gate's records from the coordinator the sidecars share.
type recordsFunc func(ctx context.Context) ([]distributed.Record, error)

// TestE2EFleetGate: four real `throttlekit serve` processes gate one
// backend of capacity C through one distributed gate; ext_proc clients
// play Envoy on every sidecar. With a coordinator (Redis, then PostgreSQL)
// the backend's in flight never exceeds the fleet's ceiling, the ceiling
// settles near C, and killing a sidecar hands its share to the others. The
// same sidecars without a coordinator put well over C in flight.
func TestE2EFleetGate(t *testing.T) {
	var runs []*fleetRun
	t.Run("redis", func(t *testing.T) {
		rdb := testenv.StartRedis(t)
		coord, err := rediscoord.New(rdb.Client(), rediscoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := runFleet(t, "redis", options{store: "redis", redisURL: rdb.URL()},
			func(ctx context.Context) ([]distributed.Record, error) { return coord.Records(ctx, "backend") })
		checkCoordinated(t, r)
		runs = append(runs, r)
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.StartPostgres(t)
		pool := pg.Pool(t, func(*pgxpool.Config) {})
		coord, err := pgcoord.New(context.Background(), pool, pgcoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := runFleet(t, "postgres", options{store: "memory", args: []string{"--postgres-url", pg.URL()}},
			func(ctx context.Context) ([]distributed.Record, error) { return coord.Records(ctx, "backend") })
		checkCoordinated(t, r)
		runs = append(runs, r)
	})
	t.Run("independent", func(t *testing.T) {
		r := runFleet(t, "", options{store: "memory"}, nil)
		st := steady(r)
		t.Logf("independent: backend in flight mean %.1f, p50 %d, max %d (C %d); %d calls, %d refused",
			st.mean, st.p50, st.max, fleetC, r.calls.Load(), r.refused.Load())
		if st.mean < 1.5*fleetC {
			t.Fatalf("independent sidecars: mean in flight %.1f, want well above C %d (≥ 1.5 C)", st.mean, fleetC)
		}
		runs = append(runs, r)
	})
	if *fleetChart != "" && !t.Failed() {
		if err := writeFleetChart(*fleetChart, runs); err != nil {
			t.Fatal(err)
		}
	}
}

// runFleet starts four sidecars with the fleet gate on coordinator (o
// says how they reach it; records reads its state, nil for none), loads
// them, samples the backend and the coordinator, and kills
// the last sidecar halfway through the steady phase when there is a
// coordinator.
func runFleet(t *testing.T, coordinator string, o options, records recordsFunc) *fleetRun {
	r := &fleetRun{name: coordinator}
	if coordinator == "" {
		r.name = "independent"
	}
	b := newCapacityBackend(t, fleetC, fleetBase)
	var sidecars []*sidecar
	for i := range fleetSize {
		o := o
		o.args = append([]string{"--node-id", fmt.Sprintf("node-%d", i)}, o.args...)
		o.files = map[string]string{"gates.yaml": fleetGatePolicy(coordinator)}
		s := startSidecar(t, o)
		s.nodeID = fmt.Sprintf("node-%d", i)
		sidecars = append(sidecars, s)
	}
	for _, s := range sidecars {
		waitFor(t, 10*time.Second, "the gate is loaded", func() (bool, string) {
			v := s.metrics(t).get("throttlekit_gate_limit", "gate", "backend")
			return v > 0, fmt.Sprintf("throttlekit_gate_limit{gate=backend} = %v", v)
		})
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, fleetSize)
	for i, s := range sidecars {
		c := extprocv3.NewExternalProcessorClient(s.conn)
		sctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		for range fleetWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sctx.Err() == nil {
					ir, err := envoy(sctx, c, b.srv.URL)
					r.calls.Add(1)
					switch {
					case err != nil && sctx.Err() == nil:
						r.failed.Add(1)
					case ir != nil:
						r.refused.Add(1)
						select { // a client told to retry backs off Envoy's default retry base interval
						case <-time.After(fleetRetry):
						case <-sctx.Done():
						}
					}
				}
			}()
		}
	}

	start := time.Now()
	end := start.Add(fleetWarm + fleetSteady)
	killAt := start.Add(fleetWarm + fleetSteady/2)
	var killed bool
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	for now := range tick.C {
		if now.After(end) {
			break
		}
		smp := fleetSample{at: now.Sub(start), inflight: int(b.inflight.Load())}
		if records != nil {
			recs, err := records(ctx)
			if err != nil {
				t.Fatalf("reading the coordinator: %v", err)
			}
			smp.global, smp.shares, smp.live = fleetState(recs, time.Now())
			if killed && r.handoff == 0 && handedOff(recs, sidecars[fleetSize-1].nodeID, start, r, smp) {
				r.handoff = smp.at
			}
		}
		r.samples = append(r.samples, smp)
		if records != nil && !killed && now.After(killAt) {
			killed = true
			cancels[fleetSize-1]() // its clients stop first: Envoy dies with its sidecar
			sidecars[fleetSize-1].kill()
			r.killAt = time.Since(start)
		}
	}
	stop()
	wg.Wait()
	if n := r.failed.Load(); n > 0 {
		t.Errorf("%s: %d ext_proc calls failed (of %d)", r.name, n, r.calls.Load())
	}
	return r
}

// handedOff reports whether the killed sidecar's share has reached the
// survivors in recs: its record is gone, each survivor has beaten since its
// lease ended (so its share was computed without it), and their shares add
// up to L_global, give or take a slot each (the ceiling moves between their
// beats). Until then it notes the dead record's lease end in r.
func handedOff(recs []distributed.Record, dead string, start time.Time, r *fleetRun, smp fleetSample) bool {
	lease := fleetLease.Microseconds()
	for _, rec := range recs {
		if rec.Node == dead && rec.ExpiresAt > start.UnixMicro()+smp.at.Microseconds() {
			r.deadEnd = time.UnixMicro(rec.ExpiresAt).Sub(start)
			return false
		}
	}
	if r.deadEnd == 0 || smp.live != fleetSize-1 || smp.shares < smp.global-smp.live {
		return false
	}
	for _, rec := range recs {
		if rec.Node != dead && time.UnixMicro(rec.ExpiresAt-lease).Sub(start) < r.deadEnd {
			return false // not beaten since the dead lease ended
		}
	}
	return true
}

// fleetState is L_global (the min of the live local limits: the gate's
// aggregate), Σ share and the live count of recs at now.
func fleetState(recs []distributed.Record, now time.Time) (global, shares, live int) {
	global = math.MaxInt
	for _, rec := range recs {
		if rec.ExpiresAt <= now.UnixMicro() {
			continue
		}
		live++
		global = min(global, rec.Local)
		shares += rec.Share
	}
	if live == 0 {
		global = 0
	}
	return global, shares, live
}

// steadyStats summarizes the backend's in flight over the steady phase.
type steadyStats struct {
	mean       float64
	p50, max   int
	globalP50  int
	globalMean float64
	samples    int
}

func steady(r *fleetRun) steadyStats {
	var st steadyStats
	var in, globals []int
	for _, s := range r.samples {
		if s.at < fleetWarm {
			continue
		}
		in = append(in, s.inflight)
		if s.global > 0 {
			globals = append(globals, s.global)
			st.globalMean += float64(s.global)
		}
		st.mean += float64(s.inflight)
		st.max = max(st.max, s.inflight)
	}
	if len(in) == 0 {
		return st
	}
	st.samples = len(in)
	st.mean /= float64(len(in))
	sort.Ints(in)
	st.p50 = in[len(in)/2]
	if len(globals) > 0 {
		st.globalMean /= float64(len(globals))
		sort.Ints(globals)
		st.globalP50 = globals[len(globals)/2]
	}
	return st
}

// checkCoordinated asserts a coordinated run: at every sample after the
// first grant, the backend's in flight is at most the fleet's ceiling —
// the highest L_global of the last lease and heartbeat (a ceiling that
// falls binds once every sidecar has beaten since: Beat's bound); the
// ceiling settles near C; and a killed sidecar's share reaches the others
// within 2 heartbeats of its lease's end.
func checkCoordinated(t *testing.T, r *fleetRun) {
	t.Helper()
	var first time.Duration = -1
	var over, overNow int
	var worst string
	for i, s := range r.samples {
		if s.global == 0 {
			continue
		}
		if first < 0 {
			first = s.at
		}
		ceiling := s.global
		for j := i; j >= 0 && s.at-r.samples[j].at <= fleetLease+fleetHeartbeat; j-- {
			ceiling = max(ceiling, r.samples[j].global)
		}
		if s.inflight > s.global {
			overNow++
		}
		if s.inflight > ceiling {
			over++
			if worst == "" {
				worst = fmt.Sprintf("at %v: %d in flight, ceiling %d (L_global now %d)", s.at, s.inflight, ceiling, s.global)
			}
		}
	}
	st := steady(r)
	t.Logf("%s: %d samples; backend in flight over the steady phase mean %.1f, p50 %d, max %d; L_global mean %.1f, p50 %d (C %d); "+
		"samples above the instant's L_global %d, above the lease's highest %d; the killed sidecar's share handed off %v after the kill, "+
		"%v after its lease ended (%.1f heartbeats); %d calls, %d refused",
		r.name, len(r.samples), st.mean, st.p50, st.max, st.globalMean, st.globalP50, fleetC, overNow, over, r.handoff-r.killAt,
		r.handoff-r.deadEnd, float64(r.handoff-r.deadEnd)/float64(fleetHeartbeat), r.calls.Load(), r.refused.Load())
	if first < 0 {
		t.Fatalf("%s: the coordinator never held a live record", r.name)
	}
	if over > 0 {
		t.Errorf("%s: %d samples with the backend's in flight above the fleet's ceiling; first %s", r.name, over, worst)
	}
	// The p95 controller saws around its target (additive rise, ×0.8
	// falls): judged by the ceiling's mean over the steady phase.
	if lo, hi := 0.6*fleetC, 1.4*fleetC; st.globalMean < lo || st.globalMean > hi {
		t.Errorf("%s: L_global averaged %.1f over the steady phase, want near C %d (in [%.1f, %.1f])", r.name, st.globalMean, fleetC, lo, hi)
	}
	// A killed process says no goodbye: its share is the coordinator's
	// again when its lease ends, and each survivor takes its part at its
	// next beat — within 2 heartbeats on a quiet machine; on two cores
	// under -race, beside three other sidecars, a beat's timer can fire a
	// heartbeat late (2.4 heartbeats was seen), so 3 are allowed.
	const handoffBeats = 3
	switch {
	case r.killAt == 0 || r.handoff == 0:
		t.Errorf("%s: the killed sidecar's share never reached the others", r.name)
	case r.handoff-r.deadEnd > handoffBeats*fleetHeartbeat:
		t.Errorf("%s: handoff %v after the killed sidecar's lease ended, want within %d heartbeats (%v)", r.name, r.handoff-r.deadEnd, handoffBeats, handoffBeats*fleetHeartbeat)
	case r.handoff-r.killAt > fleetLease+handoffBeats*fleetHeartbeat:
		t.Errorf("%s: handoff %v after the kill, want within its lease and %d heartbeats (%v)", r.name, r.handoff-r.killAt, handoffBeats, fleetLease+handoffBeats*fleetHeartbeat)
	}
}
