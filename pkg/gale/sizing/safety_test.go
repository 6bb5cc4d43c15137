package sizing_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// TestSafetyDecoupledFromLearning drives a real store with window-coupled
// leasing: several nodes share one key; each window every node leases up to
// its batch (the store grants min(batch, remaining)) whenever it runs out,
// serves its demand from local credits, and drops what is left when the
// window ends; once the store denies a lease, nodes stop asking until the
// next window (as cached-deny would). Whatever batches are used — the learners', or adversarial
// random ones — the fleet admits at most Limit per window.
func TestSafetyDecoupledFromLearning(t *testing.T) {
	const limit, windows = 200, 1500
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: limit, Period: time.Minute}
	if sizing.MaxBatch != gale.MaxLimit {
		t.Fatalf("MaxBatch %d ≠ gale.MaxLimit %d", sizing.MaxBatch, int64(gale.MaxLimit))
	}
	type batcher func(rng *rand.Rand, node int) (next func() int64, observe func(float64))
	learner := func(*rand.Rand, int) (func() int64, func(float64)) {
		s, err := sizing.NewLeaseSizer(sizing.Config{Max: 4 * limit})
		if err != nil {
			t.Fatal(err)
		}
		return s.Batch, s.Observe
	}
	predictive := func(rng *rand.Rand, _ int) (func() int64, func(float64)) {
		p, err := sizing.NewPredictiveSizer(sizing.Config{Max: 4 * limit}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return func() int64 { return p.Batch(rng.Float64() * 1e4) }, p.Observe
	}
	adversarial := func(rng *rand.Rand, _ int) (func() int64, func(float64)) {
		return func() int64 {
			switch rng.IntN(4) {
			case 0:
				return 1
			case 1:
				return limit + rng.Int64N(10*limit) // more than the whole limit
			case 2:
				return gale.MaxLimit
			}
			return 1 + rng.Int64N(limit)
		}, func(float64) {}
	}
	for _, tc := range []struct {
		name  string
		batch batcher
	}{
		{"LeaseSizer", learner},
		{"PredictiveSizer with random predictions", predictive},
		{"adversarial batches", adversarial},
	} {
		for _, nodes := range []int{1, 3, 8} {
			t.Run(fmt.Sprintf("%s/N=%d", tc.name, nodes), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(nodes), 31))
				store := memstore.New()
				next := make([]func() int64, nodes)
				observe := make([]func(float64), nodes)
				for i := range next {
					next[i], observe[i] = tc.batch(rng, i)
				}
				base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
				full, exhausted, leases := 0, 0, 0
				for w := range windows {
					start := base.Add(time.Duration(w) * rule.Period)
					// Each node's demand this window; in total from well
					// under to well over the limit.
					demand := make([]int64, nodes)
					for i := range demand {
						demand[i] = rng.Int64N(3 * limit / int64(nodes))
					}
					credits := make([]int64, nodes) // window-coupled: nothing carries over
					served := make([]int64, nodes)
					denied := false // the store ran out this window
					var admitted int64
					// Requests arrive one at a time from random nodes, at
					// increasing instants inside the window.
					for k := 0; ; k++ {
						i := rng.IntN(nodes)
						if served[i] == demand[i] {
							if done(served, demand) {
								break
							}
							continue
						}
						now := start.Add(time.Duration(k) * time.Millisecond)
						if credits[i] == 0 && !denied {
							g, err := store.Lease(context.Background(), "key", rule, 1, next[i](), now)
							if err != nil {
								t.Fatal(err)
							}
							leases++
							if g.Granted > 0 && !g.WindowEnd.Equal(start.Add(rule.Period)) {
								t.Fatalf("grant for window %v, want %v", g.WindowEnd, start.Add(rule.Period))
							}
							credits[i] = g.Granted
							denied = g.Granted == 0
						}
						served[i]++ // the request is handled, admitted or not
						if credits[i] > 0 {
							credits[i]--
							admitted++
						}
					}
					if admitted > limit {
						t.Fatalf("window %d admitted %d > Limit %d", w, admitted, limit)
					}
					if admitted == limit {
						full++
					}
					if denied {
						exhausted++
					}
					for i := range observe {
						observe[i](float64(demand[i]))
					}
				}
				if exhausted < windows/10 {
					t.Fatalf("the store ran out in only %d windows: the test does not exercise the bound", exhausted)
				}
				t.Logf("%d windows: store exhausted in %d, %d admitted exactly Limit; %d leases", windows, exhausted, full, leases)
			})
		}
	}
}

func done(served, demand []int64) bool {
	for i := range served {
		if served[i] < demand[i] {
			return false
		}
	}
	return true
}
