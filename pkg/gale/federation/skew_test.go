package federation_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// countingCoordinator counts the calls that reach the coordinator: the
// cross-region round trips.
type countingCoordinator struct {
	federation.Coordinator
	trips atomic.Int64
}

func (c *countingCoordinator) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	c.trips.Add(1)
	return c.Coordinator.Lease(ctx, key, rule, lo, hi, now)
}

func (c *countingCoordinator) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	c.trips.Add(1)
	return c.Coordinator.Reconcile(ctx, key, rule, rec)
}

// skewResult is one run of the skew scenario.
type skewResult struct {
	utilisation float64 // admitted per window / limit, over the windows run
	tripsPerAdm float64 // coordinator round trips per admission (federated)
}

// skew runs windows windows in which one region of k (two processes)
// asks demand units and the others nothing; federated over one
// coordinator, or statically partitioned (each region its slice alone).
func skew(tb testing.TB, k int, federated bool, windows int, demand int64) skewResult {
	const limit, batch = 1000, 50
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: limit, Period: time.Second}
	t0 := storetest.Timeline()
	coord := &countingCoordinator{Coordinator: federation.NewMemoryCoordinator(nil)}
	escrow := federation.NewMemoryEscrow()
	regional := memstore.New() // the static region's own store, shared by its processes
	var hot []*gale.Limiter
	for p := range 2 {
		var store gale.Store
		lrule := rule
		if federated {
			r, err := federation.NewRegion(federation.RegionConfig{Name: "hot", Instance: fmt.Sprint(p), Coordinator: coord, Escrow: escrow, Batch: batch})
			if err != nil {
				tb.Fatal(err)
			}
			store = r
		} else {
			slices, err := federation.Partition(limit, k)
			if err != nil {
				tb.Fatal(err)
			}
			lrule.Limit = slices[0] // the hot region is the earliest: the largest slice
			store = regional
		}
		l, err := gale.New(store, gale.Config{Rule: lrule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: batch / 4}, OnStoreError: gale.FailClosed, Clock: clock.NewFake(t0)})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = l.Close(context.Background()) })
		hot = append(hot, l)
	}
	ctx := context.Background()
	var admitted int64
	for w := range windows {
		start := t0.Add(time.Duration(w) * time.Second)
		for i := range demand {
			// Demand spread evenly over the window, alternating processes.
			now := start.Add(time.Duration(i) * time.Second / time.Duration(demand))
			d, err := hot[i%2].Check(ctx, "tenant", 1, now)
			if err != nil {
				tb.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
	}
	return skewResult{
		utilisation: float64(admitted) / float64(limit*int64(windows)),
		tripsPerAdm: float64(coord.trips.Load()) / float64(max(admitted, 1)),
	}
}

// TestSkewUtilisation: one hot region asking twice the limit, K−1 idle
// ones. Federated, the hot region admits ≥ 95% of the limit; statically
// partitioned, its slice, L/K.
func TestSkewUtilisation(t *testing.T) {
	for _, k := range []int{2, 4, 8} {
		fed, static := skew(t, k, true, 5, 2000), skew(t, k, false, 5, 2000)
		t.Logf("K=%d: federated %.1f%% of L (%.3f coordinator round trips per admission), static %.1f%%", k, 100*fed.utilisation, fed.tripsPerAdm, 100*static.utilisation)
		if fed.utilisation < 0.95 {
			t.Errorf("K=%d: federated utilisation %.3f < 0.95", k, fed.utilisation)
		}
		if want := 1 / float64(k); static.utilisation > want+0.001 || static.utilisation < want-0.01 {
			t.Errorf("K=%d: static utilisation %.3f, want ≈ 1/K = %.3f", k, static.utilisation, want)
		}
	}
}

// BenchmarkSkew reports the skew scenario's utilisation and round trips
// per admission (the README's federation table), and the cost of one
// check of the hot region.
func BenchmarkSkew(b *testing.B) {
	for _, k := range []int{2, 4, 8} {
		for _, federated := range []bool{true, false} {
			name := "static"
			if federated {
				name = "federated"
			}
			b.Run(fmt.Sprintf("K=%d/%s", k, name), func(b *testing.B) {
				b.ReportAllocs()
				var r skewResult
				for b.Loop() {
					r = skew(b, k, federated, 2, 2000)
				}
				b.ReportMetric(100*r.utilisation, "util%")
				b.ReportMetric(r.tripsPerAdm, "L3trips/adm")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// BenchmarkFederatedCheck is the hot path of a federated rule: a check of
// a leased limiter over a Region (memory coordinator and escrow), served
// from the process's credits but for one lease in 256 (through the escrow,
// then the coordinator).
func BenchmarkFederatedCheck(b *testing.B) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1 << 40, Period: time.Hour}
	r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: federation.NewMemoryCoordinator(nil), Escrow: federation.NewMemoryEscrow(), Batch: 1024})
	if err != nil {
		b.Fatal(err)
	}
	t0 := storetest.Timeline()
	l, err := gale.New(r, gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 256}, Clock: clock.NewFake(t0)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.Check(ctx, "tenant", 1, t0); err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
	}
}
