package fair

import (
	"fmt"
	"math"
	"slices"
)

// WaterFill returns the weighted max-min fair allocation of limit units among
// tenants with the given demands and weights: alloc[i] = min(demands[i],
// weights[i]·λ), with the water level λ the largest for which Σ alloc ≤ limit
// (λ is unbounded, and every demand met, when Σ demands ≤ limit).
//
// The allocation has these properties, checked on random instances by the
// tests:
//   - it never exceeds a demand, and Σ alloc = min(Σ demands, limit), so it
//     is work-conserving and never over the cap;
//   - alloc[i] ≥ min(demands[i], weights[i]/Σ weights · limit): no tenant gets
//     less than its static weighted share of what it asked for;
//   - raising weights[i] never lowers alloc[i].
//
// It runs in O(n log n) and allocates the result and one index slice.
// Demands and limit must be finite and ≥ 0, weights finite and > 0, and the
// slices of equal length; anything else is a caller's bug and panics.
func WaterFill(limit float64, demands, weights []float64) []float64 {
	checkInstance(limit, demands, weights)
	alloc := make([]float64, len(demands))
	order := make([]int, len(demands))
	lambda := waterLevel(limit, demands, weights, order)
	for i, d := range demands {
		alloc[i] = min(d, weights[i]*lambda)
	}
	return alloc
}

// waterLevel returns the water level λ of the instance: +Inf when every
// demand fits in limit. order is scratch space of len(demands).
//
// The tenants are visited in increasing demand per unit of weight. Each one
// whose demand fits under the level the remaining units would give the
// remaining weight is satisfied and leaves; the first that does not fit sets
// the level for itself and everyone after it.
func waterLevel(limit float64, demands, weights []float64, order []int) float64 {
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		// Compare d_a/w_a with d_b/w_b without dividing.
		x, y := demands[a]*weights[b], demands[b]*weights[a]
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	var weight float64
	for _, w := range weights {
		weight += w
	}
	left := limit
	for k, i := range order {
		if demands[i]*weight <= left*weights[i] {
			left -= demands[i]
			weight -= weights[i]
			continue
		}
		// Sum the remaining weight afresh rather than trusting the running
		// difference, which drifts when weights differ by orders of magnitude.
		weight = 0
		for _, j := range order[k:] {
			weight += weights[j]
		}
		return max(left, 0) / weight
	}
	return math.Inf(1)
}

func checkInstance(limit float64, demands, weights []float64) {
	if len(demands) != len(weights) {
		panic(fmt.Sprintf("fair: WaterFill with %d demands and %d weights", len(demands), len(weights)))
	}
	if !(limit >= 0) || math.IsInf(limit, 0) {
		panic(fmt.Sprintf("fair: WaterFill limit %v, want finite and ≥ 0", limit))
	}
	for i := range demands {
		if d := demands[i]; !(d >= 0) || math.IsInf(d, 0) {
			panic(fmt.Sprintf("fair: WaterFill demand[%d] = %v, want finite and ≥ 0", i, d))
		}
		if w := weights[i]; !(w > 0) || math.IsInf(w, 0) {
			panic(fmt.Sprintf("fair: WaterFill weight[%d] = %v, want finite and > 0", i, w))
		}
	}
}
