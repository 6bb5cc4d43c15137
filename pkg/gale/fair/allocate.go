package fair

import (
	"fmt"
	"math"
	"slices"
)

// Demand is one tenant's demand in one region, for Allocate.
type Demand struct {
	Region, Tenant string
	// Units is the demand: finite and ≥ 0.
	Units float64
	// Weight is the tenant's global weight: finite, > 0, and the same in
	// each of the tenant's entries.
	Weight float64
}

// Allocate returns the federated weighted-fair allocation of limit units
// among tenants active in several regions: alloc[i] is the share of
// demands[i]. It composes two levels of weighted max-min fairness, the way
// a federation would run them, and each tenant's global total (summed over
// its regions) equals its flat weighted max-min fair share of limit given
// its global demand and weight (WaterFill over tenants):
//
//  1. Demand-proportional weight split. A tenant t active in several regions
//     splits its weight w_t by its demand there: w_{t,r} = w_t·d_{t,r}/d_t,
//     so a tenant active in k regions is not counted k times.
//  2. Cross-region layer. The regions share limit by a water-fill whose
//     "tenants" are the regions, each weighted by its active aggregate
//     tenant weight: the weight, at the current water level, of the region's
//     tenants that the level does not yet satisfy. A region grows into the
//     surplus the other regions' satisfied tenants leave.
//  3. In-region layer. Each region splits what the cross-region layer gave
//     it among its tenants by WaterFill with the split weights.
//
// Why 2 needs the active weight: hierarchical max-min equals flat max-min
// only when an internal node weighs the sum of its backlogged children's
// weights (the Parekh–Gallager GPS decomposition). With a region's static
// weight Σ_t w_{t,r} and total demand instead, a region whose small tenants
// are satisfied keeps their weight and takes more than the flat ideal
// (TestStaticRegionWeightIsNotFlat holds an instance).
//
// It allocates the result and scratch proportional to len(demands). A
// demand or weight out of range, or a tenant given two weights, is a
// caller's bug and panics.
func Allocate(limit float64, demands []Demand) []float64 {
	if !(limit >= 0) || math.IsInf(limit, 0) {
		panic(fmt.Sprintf("fair: Allocate limit %v, want finite and ≥ 0", limit))
	}
	weights := splitWeights(demands)
	regions := groupRegions(demands, weights)
	lambda := crossRegionLevel(limit, regions)
	alloc := make([]float64, len(demands))
	for _, g := range regions {
		if len(g.demands) == 0 {
			continue
		}
		share := g.take(lambda)
		for k, a := range WaterFill(min(share, limit), g.demands, g.weights) {
			alloc[g.index[k]] = a
		}
	}
	return alloc
}

// splitWeights returns w_{t,r} = w_t·d_{t,r}/d_t for each entry: 0 for an
// entry without demand.
func splitWeights(demands []Demand) []float64 {
	type total struct{ weight, units float64 }
	totals := make(map[string]total, len(demands))
	for i, d := range demands {
		if !(d.Units >= 0) || math.IsInf(d.Units, 0) {
			panic(fmt.Sprintf("fair: Allocate demand[%d].Units = %v, want finite and ≥ 0", i, d.Units))
		}
		if !validWeight(d.Weight) {
			panic(fmt.Sprintf("fair: Allocate demand[%d].Weight = %v, want finite and > 0", i, d.Weight))
		}
		t, seen := totals[d.Tenant]
		if seen && t.weight != d.Weight {
			panic(fmt.Sprintf("fair: Allocate tenant %q has weights %v and %v", d.Tenant, t.weight, d.Weight))
		}
		totals[d.Tenant] = total{weight: d.Weight, units: t.units + d.Units}
	}
	split := make([]float64, len(demands))
	for i, d := range demands {
		if d.Units > 0 {
			t := totals[d.Tenant]
			split[i] = t.weight * (d.Units / t.units)
		}
	}
	return split
}

// region is one region's tenants with demand, as the cross-region layer
// sees them: in increasing demand per unit of weight, so the tenants a
// rising water level satisfies come off the front.
type region struct {
	index            []int // entries of the caller's demands
	demands, weights []float64
	// next is the first tenant the level has not satisfied; satisfied is the
	// demand of those before it, active the weight of those from it on.
	next              int
	satisfied, active float64
}

func groupRegions(demands []Demand, weights []float64) []*region {
	byName := make(map[string]*region)
	var regions []*region
	for i, d := range demands {
		if weights[i] == 0 {
			continue // no demand: nothing to allocate, no weight to count
		}
		g := byName[d.Region]
		if g == nil {
			g = &region{}
			byName[d.Region] = g
			regions = append(regions, g)
		}
		g.index = append(g.index, i)
	}
	for _, g := range regions {
		slices.SortFunc(g.index, func(a, b int) int {
			x, y := demands[a].Units*weights[b], demands[b].Units*weights[a]
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		for _, i := range g.index {
			g.demands = append(g.demands, demands[i].Units)
			g.weights = append(g.weights, weights[i])
			g.active += weights[i]
		}
	}
	return regions
}

// advance satisfies the region's tenants whose demand fits under level and
// reports whether any did.
func (g *region) advance(level float64) bool {
	moved := false
	for g.next < len(g.demands) && g.demands[g.next] <= g.weights[g.next]*level {
		g.satisfied += g.demands[g.next]
		g.next++
		moved = true
	}
	if moved {
		// Sum afresh rather than subtract, as waterLevel does: weights of
		// very different sizes make a running difference drift.
		g.active = 0
		for _, w := range g.weights[g.next:] {
			g.active += w
		}
	}
	return moved
}

// take is the region's allocation at the final level: its satisfied
// tenants' demand plus the level's share of its active weight.
func (g *region) take(level float64) float64 {
	if math.IsInf(level, 1) || g.active == 0 {
		return g.satisfied
	}
	return g.satisfied + g.active*level
}

// crossRegionLevel is the cross-region layer: the water level at which the
// regions, each weighted by its active aggregate tenant weight, share limit.
// Each round sets the level from the units and weight still in play, lets
// every region satisfy the tenants that fit under it, and repeats until no
// region moves; the level only rises, so it ends within one round per
// tenant. +Inf when every demand fits.
func crossRegionLevel(limit float64, regions []*region) float64 {
	for {
		var satisfied, active float64
		for _, g := range regions {
			satisfied += g.satisfied
			active += g.active
		}
		if active == 0 {
			return math.Inf(1)
		}
		level := max(limit-satisfied, 0) / active
		moved := false
		for _, g := range regions {
			if g.advance(level) {
				moved = true
			}
		}
		if !moved {
			return level
		}
	}
}
