package fair

import (
	"math"
	"math/rand/v2"
	"testing"
)

// progressiveFill is the textbook weighted max-min fair allocation, written
// as naively as possible to check WaterFill against: offer every unsatisfied
// tenant its weighted share of what is left; fix every tenant whose demand
// that share covers at its demand; repeat until no one is fixed, then give
// the rest their offers.
func progressiveFill(limit float64, demands, weights []float64) []float64 {
	alloc := make([]float64, len(demands))
	done := make([]bool, len(demands))
	left := limit
	for {
		var weight float64
		for i := range demands {
			if !done[i] {
				weight += weights[i]
			}
		}
		if weight == 0 {
			return alloc
		}
		fixed := false
		for i := range demands {
			if !done[i] && demands[i] <= weights[i]*left/weight {
				alloc[i], done[i], fixed = demands[i], true, true
			}
		}
		if !fixed {
			for i := range demands {
				if !done[i] {
					alloc[i] = weights[i] * left / weight
				}
			}
			return alloc
		}
		left = limit
		for i := range demands {
			if done[i] {
				left -= alloc[i]
			}
		}
	}
}

const tol = 1e-7

func near(a, b float64) bool { return math.Abs(a-b) <= tol*max(1, math.Abs(a), math.Abs(b)) }

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func TestWaterFillCases(t *testing.T) {
	for _, tc := range []struct {
		name             string
		limit            float64
		demands, weights []float64
		want             []float64
	}{
		{"empty", 10, nil, nil, []float64{}},
		{"all fit", 10, []float64{3, 4}, []float64{1, 1}, []float64{3, 4}},
		{"equal split", 10, []float64{20, 20}, []float64{1, 1}, []float64{5, 5}},
		{"weighted split", 100, []float64{100, 100}, []float64{3, 1}, []float64{75, 25}},
		{"small demand leaves its rest", 100, []float64{10, 100, 100}, []float64{1, 1, 2}, []float64{10, 30, 60}},
		{"heavy weight, light demand", 12, []float64{1, 20}, []float64{100, 1}, []float64{1, 11}},
		{"zero limit", 0, []float64{5, 5}, []float64{1, 2}, []float64{0, 0}},
		{"zero demands", 5, []float64{0, 0}, []float64{1, 1}, []float64{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WaterFill(tc.limit, tc.demands, tc.weights)
			if len(got) != len(tc.want) {
				t.Fatalf("WaterFill = %v, want %v", got, tc.want)
			}
			for i := range got {
				if !near(got[i], tc.want[i]) {
					t.Fatalf("WaterFill = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestWaterFillPanicsOnCallerBugs(t *testing.T) {
	for _, tc := range []struct {
		name             string
		limit            float64
		demands, weights []float64
	}{
		{"lengths differ", 1, []float64{1}, nil},
		{"negative limit", -1, []float64{1}, []float64{1}},
		{"NaN limit", math.NaN(), []float64{1}, []float64{1}},
		{"infinite limit", math.Inf(1), []float64{1}, []float64{1}},
		{"negative demand", 1, []float64{-1}, []float64{1}},
		{"zero weight", 1, []float64{1}, []float64{0}},
		{"NaN weight", 1, []float64{1}, []float64{math.NaN()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			WaterFill(tc.limit, tc.demands, tc.weights)
		})
	}
}

// instance is a random fairness instance: 1–8 tenants, weights in
// [0.1, 10), integer demands in 0..100 and an integer limit in 0..500.
func instance(r *rand.Rand) (limit float64, demands, weights []float64) {
	n := 1 + r.IntN(8)
	demands, weights = make([]float64, n), make([]float64, n)
	for i := range n {
		weights[i] = 0.1 + 9.9*r.Float64()
		demands[i] = float64(r.IntN(101))
	}
	return float64(r.IntN(501)), demands, weights
}

const instances = 20000

// TestWaterFillTheorems checks WaterFill on 20,000 seeded random instances
// against the naive reference and against the four fairness theorems.
func TestWaterFillTheorems(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2026))
	var checked [5]int
	for n := range instances {
		limit, demands, weights := instance(r)
		alloc := WaterFill(limit, demands, weights)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("instance %d (limit %v, demands %v, weights %v, alloc %v): "+format,
				append([]any{n, limit, demands, weights, alloc}, args...)...)
		}

		// Reference: the allocation is progressive filling's.
		ref := progressiveFill(limit, demands, weights)
		for i := range alloc {
			if !near(alloc[i], ref[i]) {
				fail("tenant %d gets %v, reference %v", i, alloc[i], ref[i])
			}
		}
		checked[0]++

		// (a) Guarantee: no tenant gets below min(demand, fair share), its
		// fair share being weight/Σ weights · limit. Nor above its demand.
		w := sum(weights)
		for i := range alloc {
			floor := min(demands[i], weights[i]/w*limit)
			if alloc[i] < floor-tol*max(1, floor) || alloc[i] > demands[i]+tol*max(1, demands[i]) {
				fail("tenant %d gets %v, outside [min(demand, fair share) = %v, demand]", i, alloc[i], floor)
			}
		}
		checked[1]++

		// (b) Work conservation: Σ allocation = min(Σ demand, limit): no unit
		// is withheld while some tenant still wants one.
		total := sum(alloc)
		if !near(total, min(sum(demands), limit)) {
			fail("Σ alloc = %v, want min(Σ demand, limit) = %v", total, min(sum(demands), limit))
		}
		checked[2]++

		// (c) Cap: Σ allocation ≤ limit.
		if total > limit+tol*max(1, limit) {
			fail("Σ alloc = %v over limit", total)
		}
		checked[3]++

		// (d) Weight monotonicity: raising one tenant's weight never lowers
		// its allocation.
		i := r.IntN(len(weights))
		raised := append([]float64(nil), weights...)
		raised[i] *= 1 + 4*r.Float64()
		if after := WaterFill(limit, demands, raised)[i]; after < alloc[i]-tol*max(1, alloc[i]) {
			fail("raising tenant %d's weight to %v lowers it to %v", i, raised[i], after)
		}
		checked[4]++
	}
	t.Logf("instances checked: reference %d, (a) guarantee %d, (b) work conservation %d, (c) cap %d, (d) monotonicity %d",
		checked[0], checked[1], checked[2], checked[3], checked[4])
	for _, c := range checked {
		if c != instances {
			t.Fatalf("checked %v, want %d of each", checked, instances)
		}
	}
}

// TestWaterFillMaxMin checks the defining property on small integer
// instances by exhaustion: no tenant's allocation can be raised without
// lowering that of a tenant with a smaller allocation per unit of weight.
// Equivalently every unsatisfied tenant sits on the common water level and no
// satisfied tenant sits above it.
func TestWaterFillMaxMin(t *testing.T) {
	weights := []float64{1, 2, 3}
	demands := make([]float64, 3)
	var n int
	for limit := 0.0; limit <= 12; limit++ {
		for a := 0; a <= 6; a++ {
			for b := 0; b <= 6; b++ {
				for c := 0; c <= 6; c++ {
					demands[0], demands[1], demands[2] = float64(a), float64(b), float64(c)
					alloc := WaterFill(limit, demands, weights)
					level := -1.0
					for i := range alloc {
						if alloc[i] < demands[i]-tol {
							if l := alloc[i] / weights[i]; level < 0 {
								level = l
							} else if !near(level, l) {
								t.Fatalf("limit %v demands %v: unsatisfied tenants on levels %v and %v", limit, demands, level, l)
							}
						}
					}
					for i := range alloc {
						if level >= 0 && alloc[i]/weights[i] > level+tol {
							t.Fatalf("limit %v demands %v: tenant %d above the level %v: %v", limit, demands, i, level, alloc)
						}
					}
					n++
				}
			}
		}
	}
	t.Logf("%d exhaustive instances", n)
}
