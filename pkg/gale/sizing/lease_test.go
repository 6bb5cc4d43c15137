package sizing_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// TestRegretSublinear: on noisy stationary demand, the sizer's cost minus
// that of the best fixed batch in hindsight (found by trying every batch)
// grows sublinearly: regret/T falls, and quadrupling T less than
// 2.5-folds the regret (√4 = 2 is the O(√T) bound's factor). Each horizon
// is a prefix of the same runs, and regret is averaged over four seeds.
//
// The batch is charged as leased, rounded to a whole number. For optima of a
// few credits the rounding adds its own term (the iterate hovers near a
// rounding threshold, and crossing it costs a whole credit's step), so small
// demand is checked on the unrounded iterate, in TestRegretUnrounded.
func TestRegretSublinear(t *testing.T) {
	c := sizing.Config{Max: 1e4}
	const seeds = 4
	for _, tc := range []struct {
		name         string
		mean, spread float64
	}{
		{"D=500±50%", 500, 0.5},
		{"D=50000±30%", 50000, 0.3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grid := int(4 * c.Cost.Optimum(tc.mean*(1+tc.spread)))
			var runs [seeds][]float64
			for s := range runs {
				runs[s] = stationary(uint64(s+1), 64000, tc.mean, tc.spread)
			}
			var prev, prevPer float64
			for i, T := range []int{1000, 4000, 16000, 64000} {
				regret := 0.0
				for _, run := range runs {
					b, fixed := bestFixed(c.Cost, run[:T], grid)
					if b == grid {
						t.Fatalf("best fixed batch %d at the grid's edge", b)
					}
					regret += (sizerCost(c, run[:T]) - fixed) / seeds
				}
				per := regret / float64(T)
				t.Logf("T=%6d regret=%9.1f regret/T=%.4f", T, regret, per)
				if i > 0 {
					if per >= prevPer {
						t.Errorf("regret/T %v did not fall from %v", per, prevPer)
					}
					if regret >= 2.5*prev {
						t.Errorf("regret(4T) = %v ≥ 2.5·regret(T) = %v", regret, 2.5*prev)
					}
				}
				prev, prevPer = regret, per
			}
		})
	}
}

// TestBeatsBestFixedUnderDrift: when demand drifts, no fixed batch is right
// for long, and the learner, tracking the optimum, pays less than the best
// fixed batch in hindsight.
func TestBeatsBestFixedUnderDrift(t *testing.T) {
	c := sizing.Config{Max: 1e4}
	for _, tc := range []struct {
		name   string
		demand []float64
	}{
		{"ramp 10→1000", ramp(1, 5000, 10, 1000)},
		{"ramp 1000→10", ramp(2, 5000, 1000, 10)},
		{"regimes 10/1000 every 250", regimes(3, 5000, 250, 10, 1000)},
		{"regimes 5/5000 every 1000", regimes(4, 8000, 1000, 5, 5000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sizer := sizerCost(c, tc.demand)
			b, fixed := bestFixed(c.Cost, tc.demand, 1000)
			clair := clairvoyant(c.Cost, tc.demand)
			t.Logf("sizer %.0f, best fixed (b=%d) %.0f (sizer/fixed %.3f), clairvoyant %.0f (sizer/clairvoyant %.3f)",
				sizer, b, fixed, sizer/fixed, clair, sizer/clair)
			if sizer >= fixed {
				t.Fatalf("sizer cost %.0f ≥ best fixed batch's %.0f", sizer, fixed)
			}
		})
	}
}

// TestBatchInBounds: whatever the demand, from none to absurd, Batch stays a
// whole number within [Min, Max], and it moves the right way.
func TestBatchInBounds(t *testing.T) {
	c := sizing.Config{Min: 2.5, Max: 100.7, Initial: 10}
	s, err := sizing.NewLeaseSizer(c)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 10000; i++ {
		var d float64
		switch rng.IntN(4) {
		case 0:
			d = 0
		case 1:
			d = math.MaxFloat64
		default:
			d = math.Exp(rng.Float64() * 40)
		}
		s.Observe(d)
		if b := s.Batch(); b < 3 || b > 100 {
			t.Fatalf("window %d: demand %g gave batch %d outside [3, 100]", i, d, b)
		}
	}
	// A fresh sizer goes to Min on no demand and to Max on a flood.
	s, _ = sizing.NewLeaseSizer(c)
	for range 200 {
		s.Observe(0)
	}
	if b := s.Batch(); b != 3 {
		t.Fatalf("no demand: batch %d, want Min (3)", b)
	}
	s, _ = sizing.NewLeaseSizer(c)
	for range 200 {
		s.Observe(1e9)
	}
	if b := s.Batch(); b != 100 {
		t.Fatalf("huge demand: batch %d, want Max (100)", b)
	}
}

// TestConverges: on constant demand the batch settles on b*.
func TestConverges(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    sizing.Config
		d    float64
	}{
		{"unit cost from 1", sizing.Config{}, 800},
		{"from above", sizing.Config{Initial: 5000}, 800},
		{"dear round trips", sizing.Config{Cost: sizing.Cost{OrderCost: 50}}, 100},
		{"tiny demand", sizing.Config{Initial: 1000}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sizing.NewLeaseSizer(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			for range 2000 {
				s.Observe(tc.d)
			}
			want := math.Round(max(tc.c.Cost.Optimum(tc.d), 1))
			if got := float64(s.Batch()); math.Abs(got-want) > 1 {
				t.Fatalf("batch %v after 2000 windows, b* = %v", got, want)
			}
		})
	}
}

func TestObservePanicsOnInvalidDemand(t *testing.T) {
	for _, d := range []float64{-1, math.NaN(), math.Inf(1)} {
		s, _ := sizing.NewLeaseSizer(sizing.Config{})
		p, _ := sizing.NewPredictiveSizer(sizing.Config{}, 0)
		for name, observe := range map[string]func(float64){"LeaseSizer": s.Observe, "PredictiveSizer": p.Observe} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s.Observe(%v) did not panic", name, d)
					}
				}()
				observe(d)
			}()
		}
	}
}
