package fair

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// federatedInstance is a random federation: up to 4 regions and 8 tenants,
// each tenant active in a random non-empty set of regions with a random
// demand (possibly 0) in each.
func federatedInstance(r *rand.Rand) (limit float64, demands []Demand) {
	regions := 1 + r.IntN(4)
	for t := range 1 + r.IntN(8) {
		weight := 0.1 + 9.9*r.Float64()
		first := r.IntN(regions)
		for g := range regions {
			if g == first || r.IntN(2) == 0 {
				demands = append(demands, Demand{
					Region: fmt.Sprintf("r%d", g), Tenant: fmt.Sprintf("t%d", t),
					Units: float64(r.IntN(101)), Weight: weight,
				})
			}
		}
	}
	return float64(r.IntN(501)), demands
}

// flat is the flat global problem: each tenant's demand summed over its
// regions and its weight, water-filled directly.
func flat(limit float64, demands []Demand) map[string]float64 {
	var names []string
	total, weight := map[string]float64{}, map[string]float64{}
	for _, d := range demands {
		if _, ok := total[d.Tenant]; !ok {
			names = append(names, d.Tenant)
		}
		total[d.Tenant] += d.Units
		weight[d.Tenant] = d.Weight
	}
	ds, ws := make([]float64, len(names)), make([]float64, len(names))
	for i, n := range names {
		ds[i], ws[i] = total[n], weight[n]
	}
	want := map[string]float64{}
	for i, a := range WaterFill(limit, ds, ws) {
		want[names[i]] = a
	}
	return want
}

// byTenant sums an allocation over each tenant's regions.
func byTenant(demands []Demand, alloc []float64) map[string]float64 {
	got := map[string]float64{}
	for i, d := range demands {
		got[d.Tenant] += alloc[i]
	}
	return got
}

// TestAllocateIsFlatWaterFill: on random federations, each tenant's global
// total from the two-level composition equals the direct water-fill of the
// flat problem, and no region is given more than its demand.
func TestAllocateIsFlatWaterFill(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 13))
	for run := range instances {
		limit, demands := federatedInstance(r)
		alloc := Allocate(limit, demands)
		var total, asked float64
		for i, d := range demands {
			if alloc[i] < -tol || alloc[i] > d.Units+tol {
				t.Fatalf("run %d: %s in %s gets %v of a demand of %v", run, d.Tenant, d.Region, alloc[i], d.Units)
			}
			total += alloc[i]
			asked += d.Units
		}
		if !near(total, min(asked, limit)) {
			t.Fatalf("run %d: allocates %v, want min(Σ demand, limit) = %v", run, total, min(asked, limit))
		}
		want, got := flat(limit, demands), byTenant(demands, alloc)
		for name, w := range want {
			if !near(got[name], w) {
				t.Fatalf("run %d (limit %v, demands %+v): tenant %s gets %v over its regions, the flat water-fill %v",
					run, limit, demands, name, got[name], w)
			}
		}
	}
	t.Logf("%d random federations", instances)
}

// staticHierarchy is the composition with each region weighted statically by
// Σ of its tenants' split weights and asking its total demand: the foil
// the active aggregate weight replaces.
func staticHierarchy(limit float64, demands []Demand) []float64 {
	weights := splitWeights(demands)
	var names []string
	idx := map[string][]int{}
	for i, d := range demands {
		if _, ok := idx[d.Region]; !ok {
			names = append(names, d.Region)
		}
		idx[d.Region] = append(idx[d.Region], i)
	}
	rd, rw := make([]float64, len(names)), make([]float64, len(names))
	for k, n := range names {
		for _, i := range idx[n] {
			rd[k] += demands[i].Units
			rw[k] += weights[i]
		}
	}
	alloc := make([]float64, len(demands))
	for k, share := range WaterFill(limit, rd, rw) {
		var ds, ws []float64
		for _, i := range idx[names[k]] {
			ds, ws = append(ds, demands[i].Units), append(ws, weights[i])
		}
		for j, a := range WaterFill(share, ds, ws) {
			alloc[idx[names[k]][j]] = a
		}
	}
	return alloc
}

// TestStaticRegionWeightIsNotFlat: a region whose small tenant is satisfied
// keeps that tenant's weight under a static region weight and takes more
// than the flat ideal; the active aggregate weight gives the flat answer.
func TestStaticRegionWeightIsNotFlat(t *testing.T) {
	demands := []Demand{
		{Region: "eu", Tenant: "small", Units: 1, Weight: 1},
		{Region: "eu", Tenant: "big-eu", Units: 100, Weight: 1},
		{Region: "us", Tenant: "big-us", Units: 100, Weight: 1},
	}
	want := flat(100, demands) // small 1, the big ones 49.5 each
	if !near(want["big-eu"], 49.5) || !near(want["big-us"], 49.5) {
		t.Fatalf("flat water-fill %v, want the big tenants at 49.5", want)
	}
	static := byTenant(demands, staticHierarchy(100, demands))
	if near(static["big-us"], want["big-us"]) {
		t.Fatalf("the static hierarchy gives big-us %v, the flat ideal: the instance shows nothing", static["big-us"])
	}
	got := byTenant(demands, Allocate(100, demands))
	for name, w := range want {
		if !near(got[name], w) {
			t.Fatalf("Allocate gives %s %v, want %v (the static hierarchy gives %v)", name, got[name], w, static[name])
		}
	}
}

// TestWithoutTheSplitATenantCountsTwice: a tenant active in two regions with
// its whole weight in each takes two shares; split by demand it takes one.
func TestWithoutTheSplitATenantCountsTwice(t *testing.T) {
	demands := []Demand{
		{Region: "eu", Tenant: "both", Units: 50, Weight: 1},
		{Region: "us", Tenant: "both", Units: 50, Weight: 1},
		{Region: "us", Tenant: "one", Units: 100, Weight: 1},
	}
	unsplit := WaterFill(100, []float64{50, 50, 100}, []float64{1, 1, 1})
	if twice := unsplit[0] + unsplit[1]; !(twice > 60) {
		t.Fatalf("unsplit, the two-region tenant gets %v: the instance shows nothing", twice)
	}
	got := byTenant(demands, Allocate(100, demands))
	if !near(got["both"], 50) || !near(got["one"], 50) {
		t.Fatalf("Allocate gives %v, want 50 each", got)
	}
}

func TestAllocatePanicsOnCallerBugs(t *testing.T) {
	for name, f := range map[string]func(){
		"negative limit":   func() { Allocate(-1, nil) },
		"NaN units":        func() { Allocate(1, []Demand{{Tenant: "a", Units: math.NaN(), Weight: 1}}) },
		"zero weight":      func() { Allocate(1, []Demand{{Tenant: "a", Units: 1}}) },
		"two weights":      func() { Allocate(1, []Demand{{Tenant: "a", Units: 1, Weight: 1}, {Tenant: "a", Units: 1, Weight: 2}}) },
		"infinite demands": func() { Allocate(1, []Demand{{Tenant: "a", Units: math.Inf(1), Weight: 1}}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func mustFederated(t testing.TB, cfg Config) *Federated {
	t.Helper()
	f, err := NewFederated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// decider is Federated or the naive pool, for the timelines below.
type decider func(region, tenant string, now time.Time) bool

// federatedBacklog runs one window of round-robin calls of one unit over the
// pairs until each has asked for its demand, and returns each pair's
// admissions.
func federatedBacklog(t *testing.T, decide decider, start time.Time, demands []Demand) []int64 {
	t.Helper()
	got, asked := make([]int64, len(demands)), make([]int64, len(demands))
	for step := 0; ; step++ {
		progress := false
		for i, d := range demands {
			if asked[i] >= int64(d.Units) {
				continue
			}
			asked[i]++
			progress = true
			if decide(d.Region, d.Tenant, start.Add(time.Duration(step)*time.Microsecond)) {
				got[i]++
			}
		}
		if !progress {
			return got
		}
	}
}

func (f *Federated) decider() decider {
	return func(region, tenant string, now time.Time) bool { return f.Decide(region, tenant, 1, now).Allowed }
}

// TestFederatedSteadyStateIsFlatWaterFill: under steady demand, from the
// second window on, each pair is admitted its share from Allocate rounded
// down, so each tenant's global admissions are its flat weighted max-min
// fair share within one unit per region it calls from; no window admits
// more than Limit.
func TestFederatedSteadyStateIsFlatWaterFill(t *testing.T) {
	const w = time.Second
	r := rand.New(rand.NewPCG(9, 14))
	const runs = 1000
	for run := range runs {
		limitF, demands := federatedInstance(r)
		limit := max(int64(limitF), 1)
		cfg := Config{Limit: limit, Window: w, Weights: map[string]float64{}}
		for _, d := range demands {
			cfg.Weights[d.Tenant] = d.Weight
		}
		f := mustFederated(t, cfg)
		share := Allocate(float64(limit), demands)
		want := flat(float64(limit), demands)
		for k := range 3 {
			got := federatedBacklog(t, f.decider(), t0.Add(time.Duration(k)*w), demands)
			var total int64
			tenants := map[string]float64{}
			regions := map[string]int{}
			for i, d := range demands {
				total += got[i]
				tenants[d.Tenant] += float64(got[i])
				regions[d.Tenant]++
				if k > 0 && (float64(got[i]) > share[i]+tol || float64(got[i]) < math.Floor(share[i]+1e-9)) {
					t.Fatalf("run %d window %d (limit %d, demands %+v): pair %d admitted %d, want its share %v rounded down",
						run, k, limit, demands, i, got[i], share[i])
				}
			}
			if total > limit {
				t.Fatalf("run %d window %d: admits %d > Limit %d", run, k, total, limit)
			}
			if k == 0 {
				continue
			}
			for name, x := range want {
				if tenants[name] > x+tol || tenants[name] < math.Floor(x+1e-9)-float64(regions[name]) {
					t.Fatalf("run %d window %d: tenant %s admitted %v over %d regions, flat share %v",
						run, k, name, tenants[name], regions[name], x)
				}
			}
		}
	}
	t.Logf("%d random federations, 3 windows each", runs)
}

// TestFederatedReservesALateRegion: a light tenant in one region calls
// first in every window, a heavy one in another region later. Naive
// pooling — each region's own weighted-fair escrow over a plain shared
// counter — is first come, first served across regions and starves the
// late region every window; the federated escrow reserves its guarantee
// from the second window on (once its demand has been seen).
func TestFederatedReservesALateRegion(t *testing.T) {
	const limit, w = 100, time.Minute
	weights := map[string]float64{"light": 1, "heavy": 3}
	demands := []Demand{
		{Region: "eu", Tenant: "light", Units: 100, Weight: 1},
		{Region: "us", Tenant: "heavy", Units: 100, Weight: 3},
	}
	// The light tenant's calls all come before the heavy one's.
	late := func(decide decider, start time.Time) (light, heavy int64) {
		light = federatedBacklog(t, decide, start, demands[:1])[0]
		heavy = federatedBacklog(t, decide, start.Add(w/2), demands[1:])[0]
		return light, heavy
	}

	naive := naivePool(t, Config{Limit: limit, Window: w, Weights: weights})
	f := mustFederated(t, Config{Limit: limit, Window: w, Weights: weights})
	for k := range 4 {
		start := t0.Add(time.Duration(k) * w)
		if l, h := late(naive, start); l != limit || h != 0 {
			t.Fatalf("window %d, naive pooling: light %d, heavy %d; want the light tenant to take it all", k, l, h)
		}
		l, h := late(f.decider(), start)
		if k == 0 {
			continue // no demand seen yet: nothing is reserved
		}
		if l != 25 || h != 75 {
			t.Fatalf("window %d, federated: light %d, heavy %d; want 25 and 75", k, l, h)
		}
	}
}

// naivePool is per-region weighted-fair escrows over one plain shared
// counter: fair.Shared, one per region, leasing from the same key.
func naivePool(t *testing.T, cfg Config) decider {
	store := memstore.New()
	shared := map[string]*Shared{}
	return func(region, tenant string, now time.Time) bool {
		s := shared[region]
		if s == nil {
			var err error
			if s, err = NewShared(cfg, store, "pool", 1); err != nil {
				t.Fatal(err)
			}
			shared[region] = s
		}
		d, err := s.Decide(context.Background(), tenant, 1, now)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
}

// TestFederatedHoldsLimitConcurrent hammers one Federated from several
// goroutines (run it with -race): no window admits more than Limit.
func TestFederatedHoldsLimitConcurrent(t *testing.T) {
	const limit, w = 50, time.Millisecond
	f := mustFederated(t, Config{Limit: limit, Window: w, Weights: map[string]float64{"a": 2}})
	regions, tenants := []string{"eu", "us", "ap"}, []string{"a", "b", "c", "d", "e"}
	var mu sync.Mutex
	admitted := map[time.Time]int64{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for i := range 2000 {
				cost := 1 + r.Int64N(3)
				d := f.Decide(regions[r.IntN(len(regions))], tenants[r.IntN(len(tenants))], cost,
					t0.Add(time.Duration(i)*time.Microsecond))
				if d.Allowed {
					mu.Lock()
					admitted[d.ResetAt] += cost
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	full := 0
	for end, n := range admitted {
		if n > limit {
			t.Fatalf("the window ending %v admitted %d > Limit %d", end, n, limit)
		}
		if n == limit {
			full++
		}
	}
	if full == 0 {
		t.Fatalf("no window reached Limit %d under load far above it: %v", limit, admitted)
	}
}

func TestFederatedBoundsPairs(t *testing.T) {
	f := mustFederated(t, Config{Limit: 10, Window: time.Minute, MaxTenants: 2})
	f.Decide("eu", "a", 1, t0)
	f.Decide("us", "a", 1, t0)
	if d := f.Decide("ap", "a", 1, t0); d.Allowed || d.Reason != ReasonTenants {
		t.Fatalf("a third pair over MaxTenants 2: %+v, want ReasonTenants", d)
	}
	if d := f.Decide("eu", "a", 1, t0); !d.Allowed {
		t.Fatalf("a tracked pair: %+v, want admitted", d)
	}
}

func TestNewFederatedRejectsBadConfig(t *testing.T) {
	if _, err := NewFederated(Config{Limit: 0, Window: time.Second}); err == nil {
		t.Fatal("Limit 0 accepted")
	}
	if _, err := NewFederated(Config{Limit: 1, Window: time.Second, Weights: map[string]float64{"a": -1}}); err == nil {
		t.Fatal("a negative weight accepted")
	}
}

func BenchmarkFederatedDecide(b *testing.B) {
	for _, n := range []int{2, 8} {
		b.Run(fmt.Sprintf("%dregions×%dtenants", n, 4*n), func(b *testing.B) {
			f := mustFederated(b, Config{Limit: 5000, Window: 10 * time.Millisecond})
			regions, tenants := make([]string, n), make([]string, 4*n)
			for i := range regions {
				regions[i] = fmt.Sprintf("r%d", i)
			}
			for i := range tenants {
				tenants[i] = fmt.Sprintf("t%d", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				f.Decide(regions[i%n], tenants[(i/n)%(4*n)], 1, t0.Add(time.Duration(i)*time.Microsecond))
				i++
			}
		})
	}
}

// TestFederatedReservationHolds: while every pair calls within the demand
// it showed last window, in any order and with any costs, each pair's
// reservation — the part of its guarantee within that demand — is
// admitted: borrowers leave it alone. Tenants here call from one region
// each and every weight is configured, so guarantees do not move within a
// window.
func TestFederatedReservationHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 15))
	for run := range 2000 {
		limit := int64(1 + r.IntN(60))
		cfg := Config{Limit: limit, Window: time.Second, Weights: map[string]float64{}}
		var pairs []Demand
		for i := range 2 + r.IntN(4) {
			name := fmt.Sprintf("t%d", i)
			cfg.Weights[name] = 0.5 + 4*r.Float64()
			pairs = append(pairs, Demand{Region: fmt.Sprintf("r%d", r.IntN(3)), Tenant: name, Units: float64(1 + r.IntN(40)), Weight: cfg.Weights[name]})
		}
		f := mustFederated(t, cfg)
		federatedBacklog(t, f.decider(), t0, pairs) // the demand seen
		start := t0.Add(time.Second)
		asked, admitted := make([]int64, len(pairs)), make([]int64, len(pairs))
		for step := 0; ; step++ {
			var open []int
			for i, p := range pairs {
				if asked[i] < int64(p.Units) {
					open = append(open, i)
				}
			}
			if len(open) == 0 {
				break
			}
			i := open[r.IntN(len(open))]
			p := pairs[i]
			cost := min(1+r.Int64N(3), int64(p.Units)-asked[i])
			asked[i] += cost
			d := f.Decide(p.Region, p.Tenant, cost, start.Add(time.Duration(step)*time.Microsecond))
			if reserved := min(d.Guarantee, int64(p.Units)); admitted[i]+cost <= reserved && !d.Allowed {
				t.Fatalf("run %d step %d: %s in %s asks %d within its reservation %d (admitted %d) and is denied: %+v",
					run, step, p.Tenant, p.Region, cost, reserved, admitted[i], d)
			}
			if d.Allowed {
				admitted[i] += cost
			}
		}
	}
}
