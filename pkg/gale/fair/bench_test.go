package fair

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// BenchmarkDecideShare is the common case: one tenant within its guarantee.
func BenchmarkDecideShare(b *testing.B) {
	e := mustNew(b, Config{Limit: 1 << 40, Window: time.Hour})
	b.ReportAllocs()
	for b.Loop() {
		e.Decide("tenant", 1, t0)
	}
}

// BenchmarkDecideContended runs tenants tenants, weighted 1..n, on a budget
// each window exhausts: tenant 0 sends half the calls, so it borrows (a
// water-fill per call) and is denied once its fair share is spent. The
// clock advances 1µs a call through 10ms windows of 5000 units.
func BenchmarkDecideContended(b *testing.B) {
	for _, n := range []int{2, 8, 64} {
		b.Run(strconv.Itoa(n)+"tenants", func(b *testing.B) {
			cfg := Config{Limit: 5000, Window: 10 * time.Millisecond, Weights: map[string]float64{}}
			names := make([]string, n)
			for i := range names {
				names[i] = "tenant-" + strconv.Itoa(i)
				cfg.Weights[names[i]] = float64(1 + i)
			}
			e := mustNew(b, cfg)
			var reasons [ReasonTenants + 1]int
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				name := names[0]
				if i%2 == 1 {
					name = names[1+(i/2)%(n-1)]
				}
				reasons[e.Decide(name, 1, t0.Add(time.Duration(i)*time.Microsecond)).Reason]++
				i++
			}
			for r := ReasonCap; r <= ReasonDenied; r++ {
				b.ReportMetric(float64(reasons[r])/float64(i), r.String()+"/op")
			}
		})
	}
}

// BenchmarkDecideBeyondGuarantee is a call beyond its tenant's guarantee
// with n tenants tracked: the escrow scans them for their claims and sorts
// them for the water level, the cost Config.MaxTenants bounds. The others
// asked one unit each; a window of 10·n units rolls every 5·n calls.
func BenchmarkDecideBeyondGuarantee(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(strconv.Itoa(n)+"tenants", func(b *testing.B) {
			e := mustNew(b, Config{Limit: int64(10 * n), Window: time.Hour})
			for i := range n {
				e.Decide("tenant-"+strconv.Itoa(i), 1, t0)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e.Decide("tenant-0", 1, t0.Add(time.Duration(i/(5*n))*time.Hour))
				i++
			}
		})
	}
}

// BenchmarkDecideParallel measures the escrow's mutex under contention.
func BenchmarkDecideParallel(b *testing.B) {
	e := mustNew(b, Config{Limit: 1 << 40, Window: time.Hour, Weights: map[string]float64{"a": 1, "b": 2}})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e.Decide([]string{"a", "b", "c", "d"}[i%4], 1, t0)
			i++
		}
	})
}

// BenchmarkSharedDecide is a process of a fleet over memstore, leasing in
// quanta of 64: about one lease per 64 admissions, plus one per window.
func BenchmarkSharedDecide(b *testing.B) {
	s, err := NewShared(Config{Limit: 1 << 30, Window: time.Second}, memstore.New(), "bench", 64)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Decide(ctx, "tenant", 1, t0.Add(time.Duration(i)*time.Microsecond)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkWaterFill8(b *testing.B) {
	demands := []float64{5, 50, 500, 10, 100, 1000, 20, 200}
	weights := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	b.ReportAllocs()
	for b.Loop() {
		WaterFill(1000, demands, weights)
	}
}
