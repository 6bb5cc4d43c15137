package sizing_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// predictiveCost runs a fresh PredictiveSizer over demand, predicting
// window i's demand as predict(i), and returns its total cost.
func predictiveCost(t *testing.T, c sizing.Config, demand []float64, predict func(i int) float64) (total, followWeight float64) {
	p, err := sizing.NewPredictiveSizer(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range demand {
		total += c.Cost.At(d, float64(p.Batch(predict(i))))
		p.Observe(d)
	}
	followWeight, _ = p.Weights()
	return total, followWeight
}

// TestPredictiveConsistent: with accurate predictions (exact, or within
// ±10%) the sizer comes within a few percent of the clairvoyant optimum
// Σ f_D(b*), on demand where the robust learner alone lags.
func TestPredictiveConsistent(t *testing.T) {
	c := sizing.Config{Max: 1e5}
	demand := regimes(11, 5000, 50, 10, 3000)
	rng := rand.New(rand.NewPCG(12, 12))
	noise := make([]float64, len(demand))
	for i := range noise {
		noise[i] = 0.9 + 0.2*rng.Float64()
	}
	clair := clairvoyant(c.Cost, demand)
	robust := sizerCost(c, demand)
	for _, tc := range []struct {
		name    string
		predict func(i int) float64
		within  float64
	}{
		{"exact", func(i int) float64 { return demand[i] }, 0.02},
		{"±10%", func(i int) float64 { return demand[i] * noise[i] }, 0.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, w := predictiveCost(t, c, demand, tc.predict)
			t.Logf("predictive %.0f, clairvoyant %.0f (ratio %.4f), robust LeaseSizer %.0f (ratio %.4f); follow weight %.4f",
				got, clair, got/clair, robust, robust/clair, w)
			if got > clair*(1+tc.within) {
				t.Fatalf("cost %.0f more than %.0f%% above the clairvoyant %.0f", got, 100*tc.within, clair)
			}
		})
	}
}

// TestPredictiveRobust: with adversarially bad predictions the sizer falls
// back to the robust LeaseSizer, within a small factor of its cost.
func TestPredictiveRobust(t *testing.T) {
	c := sizing.Config{Max: 1e5}
	rng := rand.New(rand.NewPCG(21, 21))
	random := make([]float64, 10000)
	for i := range random {
		random[i] = math.Exp(rng.Float64() * 14) // 1 to 1.2 million
	}
	for _, tc := range []struct {
		name    string
		demand  []float64
		predict func(d []float64, i int) float64
	}{
		{"1000× too high", stationary(22, 5000, 500, 0.5), func(d []float64, i int) float64 { return 1000 * d[i] }},
		{"1000× too low", stationary(23, 5000, 500, 0.5), func(d []float64, i int) float64 { return d[i] / 1000 }},
		{"inverted regimes", regimes(24, 5000, 100, 10, 3000), func(d []float64, i int) float64 { return 3010 - d[i] }},
		{"random", stationary(25, 5000, 500, 0.5), func(_ []float64, i int) float64 { return random[i] }},
		{"right then wrong", regimes(26, 6000, 100, 10, 3000), func(d []float64, i int) float64 {
			if i < 3000 {
				return d[i]
			}
			return 3010 - d[i]
		}},
		{"NaN", stationary(27, 5000, 500, 0.5), func([]float64, int) float64 { return math.NaN() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			robust := sizerCost(c, tc.demand)
			got, w := predictiveCost(t, c, tc.demand, func(i int) float64 { return tc.predict(tc.demand, i) })
			t.Logf("predictive %.0f, robust LeaseSizer %.0f (ratio %.4f); follow weight %.2g", got, robust, got/robust, w)
			if got > 1.1*robust {
				t.Fatalf("cost %.0f more than 10%% above the robust sizer's %.0f", got, robust)
			}
		})
	}
}
