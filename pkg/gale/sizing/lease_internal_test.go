package sizing

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRegretUnrounded checks the learner itself at a small optimum (b* ≈ 6)
// where rounding to whole batches would dominate: charged at the unrounded
// iterate eˣ against the best fixed real batch, regret is O(√T).
func TestRegretUnrounded(t *testing.T) {
	const seeds, mean, spread = 4, 20.0, 0.9
	var prev float64
	for i, T := range []int{1000, 4000, 16000, 64000} {
		regret := 0.0
		for seed := uint64(1); seed <= seeds; seed++ {
			rng := rand.New(rand.NewPCG(seed, 1))
			s, err := NewLeaseSizer(Config{Max: 1e4})
			if err != nil {
				t.Fatal(err)
			}
			cost, sum := 0.0, 0.0
			for range T {
				d := mean * (1 + spread*(2*rng.Float64()-1))
				sum += d
				cost += s.cost.At(d, math.Exp(s.x))
				s.Observe(d)
			}
			// f is linear in D, so the best fixed real batch is Optimum(mean).
			b := s.cost.Optimum(sum / float64(T))
			regret += (cost - (sum/b + float64(T)*b/2)) / seeds
		}
		t.Logf("T=%6d regret=%7.1f regret/T=%.4f", T, regret, regret/float64(T))
		if i > 0 && regret >= 2.5*prev {
			t.Errorf("regret(4T) = %v ≥ 2.5·regret(T) = %v", regret, 2.5*prev)
		}
		prev = regret
	}
}
