package sizing_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// fleetDemand is the requests node i receives in window w: skewed across
// nodes (node i gets a share ∝ 1/(i+1)) and drifting over time (a slow
// sine between 0.1× and 1× of the peak, then a regime switch halfway).
func fleetDemand(i, w, windows int) int {
	peak := 2000.0
	if w >= windows/2 {
		peak = 300 // the fleet's demand drops to a new regime
	}
	drift := 0.55 + 0.45*math.Sin(2*math.Pi*float64(w)/float64(windows/3))
	return int(peak * drift / float64(i+1))
}

type fleetResult struct {
	batch          string
	admitted       int64
	storeOps       int64
	strandedPerWin float64
	opsPerAdmit    float64
}

// runFleet drives 4 leased, window-coupled limiters (one per node) over one
// store with fleetDemand, each key's batch fixed or learned, and counts the
// store operations (leases) and the credits stranded at window ends.
func runFleet(t testing.TB, store gale.Store, ops func() int64, batch int64, auto bool, windows int) fleetResult {
	const nodes = 4
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1 << 30, Period: time.Second}
	var ls []*gale.Limiter
	for i := 0; i < nodes; i++ {
		cfg := gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: batch}, StoreTimeout: 10 * time.Second}
		if auto {
			cfg.Lease.NewSizer = func() gale.BatchSizer {
				s, err := sizing.NewLeaseSizer(sizing.Config{Min: 1, Max: 4096, Initial: 100})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}
		l, err := gale.New(store, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ls = append(ls, l)
	}
	key := fmt.Sprintf("fleet/%d/%v/%d", batch, auto, time.Now().UnixNano())
	start := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	before := ops()
	var admitted int64
	for w := 0; w <= windows; w++ {
		now := start.Add(time.Duration(w) * time.Second)
		for i, l := range ls {
			n := fleetDemand(i, w, windows)
			if w == windows {
				n = 1 // one touch after the last window, to count its stranded credits
			}
			for k := 0; k < n; k++ {
				d, err := l.Check(context.Background(), key, 1, now.Add(time.Duration(k)*time.Microsecond))
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed && w < windows {
					admitted++
				}
			}
		}
	}
	r := fleetResult{admitted: admitted, storeOps: ops() - before}
	var stranded int64
	for _, l := range ls {
		stranded += l.Stats().CreditsStranded
	}
	r.strandedPerWin = float64(stranded) / float64(windows)
	r.opsPerAdmit = float64(r.storeOps) / float64(admitted)
	if auto {
		r.batch = "auto"
	} else {
		r.batch = fmt.Sprint(batch)
	}
	return r
}

// eoq is the EOQ cost of a run, per window: one unit per store operation,
// one unit per two stranded credits (sizing's default costs: OrderCost 1,
// StrandPenalty 1 per credit held half a window on average).
func eoq(r fleetResult, windows int) float64 {
	return float64(r.storeOps)/float64(windows) + r.strandedPerWin/2
}

var fixedBatches = []int64{4, 8, 16, 32, 64, 128, 256, 512, 1024}

// compareFleet runs every fixed batch and auto, and returns auto's result and
// the best fixed batch's (by EOQ cost, in hindsight).
func compareFleet(t testing.TB, store gale.Store, ops func() int64, windows int) (auto, best fleetResult, all []fleetResult) {
	for _, b := range fixedBatches {
		r := runFleet(t, store, ops, b, false, windows)
		all = append(all, r)
		if best.batch == "" || eoq(r, windows) < eoq(best, windows) {
			best = r
		}
	}
	auto = runFleet(t, store, ops, 0, true, windows)
	return auto, best, append(all, auto)
}

// TestAutoBatchNearBestFixed: on the skewed, drifting fleet the learned batch
// costs within 10% of the best fixed batch chosen in hindsight, without
// knowing it in advance.
func TestAutoBatchNearBestFixed(t *testing.T) {
	const windows = 300
	s := memstore.New()
	var calls int64
	counted := &countingStore{Store: s, n: &calls}
	auto, best, all := compareFleet(t, counted, func() int64 { return calls }, windows)
	for _, r := range all {
		t.Logf("batch %5s: store ops/admission %.4f, stranded/window %7.1f, EOQ cost/window %7.1f", r.batch, r.opsPerAdmit, r.strandedPerWin, eoq(r, windows))
	}
	if eoq(auto, windows) > 1.10*eoq(best, windows) {
		t.Fatalf("auto costs %.1f per window, more than 10%% above the best fixed batch %s (%.1f)", eoq(auto, windows), best.batch, eoq(best, windows))
	}
}

// BenchmarkAutoVsFixedBatchRedis: the same fleet over a real Redis; reports
// Redis scripts per admission and credits stranded per window for every
// fixed batch and for auto.
func BenchmarkAutoVsFixedBatchRedis(b *testing.B) {
	srv := testenv.StartRedis(b)
	s, err := redisstore.New(srv.Client(), redisstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ops := func() int64 { return int64(s.Stats().Ops) }
	const windows = 120
	for _, batch := range append(fixedBatches, 0) {
		name := fmt.Sprintf("batch=%d", batch)
		if batch == 0 {
			name = "batch=auto"
		}
		b.Run(name, func(b *testing.B) {
			var r fleetResult
			for i := 0; i < b.N; i++ {
				r = runFleet(b, s, ops, batch, batch == 0, windows)
			}
			b.ReportMetric(r.opsPerAdmit, "redis-ops/admission")
			b.ReportMetric(r.strandedPerWin, "stranded/window")
			b.ReportMetric(eoq(r, windows), "eoq-cost/window")
		})
	}
}

type countingStore struct {
	gale.Store
	n *int64
}

func (c *countingStore) Lease(ctx context.Context, key string, r gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	*c.n++
	return c.Store.Lease(ctx, key, r, min, max, now)
}
