package sizing_test

import (
	"math"
	"math/rand/v2"

	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// Demand sequences, one value per window, all seeded.

// stationary is noisy demand around mean: mean·(1 + spread·u), u uniform in
// [−1, 1].
func stationary(seed uint64, n int, mean, spread float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	d := make([]float64, n)
	for i := range d {
		d[i] = mean * (1 + spread*(2*rng.Float64()-1))
	}
	return d
}

// ramp grows geometrically from lo to hi over n windows, with ±10% noise.
func ramp(seed uint64, n int, lo, hi float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 2))
	d := make([]float64, n)
	for i := range d {
		base := lo * math.Pow(hi/lo, float64(i)/float64(n-1))
		d[i] = base * (0.9 + 0.2*rng.Float64())
	}
	return d
}

// regimes alternates between demand lo and hi every length windows, with
// ±10% noise.
func regimes(seed uint64, n, length int, lo, hi float64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 3))
	d := make([]float64, n)
	for i := range d {
		base := lo
		if (i/length)%2 == 1 {
			base = hi
		}
		d[i] = base * (0.9 + 0.2*rng.Float64())
	}
	return d
}

// sizerCost runs a fresh LeaseSizer over demand and returns its total cost,
// charged at the whole batch it returned each window.
func sizerCost(c sizing.Config, demand []float64) float64 {
	s, err := sizing.NewLeaseSizer(c)
	if err != nil {
		panic(err)
	}
	total := 0.0
	for _, d := range demand {
		total += c.Cost.At(d, float64(s.Batch()))
		s.Observe(d)
	}
	return total
}

// bestFixed is the reference: the best whole batch in [1, maxBatch] held for
// the whole run, found by trying every one. Σ_t f_{D_t}(b) is
// OrderCost·ΣD/b + StrandPenalty·T·b/2, so each try costs O(1).
func bestFixed(c sizing.Cost, demand []float64, maxBatch int) (batch int, total float64) {
	sum := 0.0
	for _, d := range demand {
		sum += d
	}
	n := float64(len(demand))
	total = math.Inf(1)
	for b := 1; b <= maxBatch; b++ {
		if f := n * c.At(sum/n, float64(b)); f < total {
			batch, total = b, f
		}
	}
	return batch, total
}

// clairvoyant is Σ f_D(b*): the cost of knowing each window's demand.
func clairvoyant(c sizing.Cost, demand []float64) float64 {
	total := 0.0
	for _, d := range demand {
		total += c.At(d, max(c.Optimum(d), 1))
	}
	return total
}
