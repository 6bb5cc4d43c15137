package sizing_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// TestOptimum checks Optimum against the closed form and against a fine
// grid search of At.
func TestOptimum(t *testing.T) {
	costs := []struct {
		name string
		cost sizing.Cost
		a, h float64 // the cost with defaults applied
	}{
		{"zero value", sizing.Cost{}, 1, 1},
		{"unit", sizing.Cost{OrderCost: 1, StrandPenalty: 1}, 1, 1},
		{"dear round trips", sizing.Cost{OrderCost: 50, StrandPenalty: 0.5}, 50, 0.5},
		{"dear stranding", sizing.Cost{OrderCost: 0.01, StrandPenalty: 3}, 0.01, 3},
		{"default strand", sizing.Cost{OrderCost: 8}, 8, 1},
	}
	for _, tc := range costs {
		for _, d := range []float64{0.5, 1, 37, 500, 1e6, 1e12} {
			t.Run(fmt.Sprintf("%s/D=%g", tc.name, d), func(t *testing.T) {
				opt := tc.cost.Optimum(d)
				if want := math.Sqrt(2 * tc.a * d / tc.h); !near(opt, want, 1e-12) {
					t.Fatalf("Optimum = %v, closed form %v", opt, want)
				}
				fOpt := tc.cost.At(d, opt)
				if want := math.Sqrt(2 * tc.a * tc.h * d); !near(fOpt, want, 1e-12) {
					t.Fatalf("At(Optimum) = %v, want √(2·a·h·D) = %v", fOpt, want)
				}
				// A grid of 60,001 batches from b*/20 to 20·b*, 0.01% apart:
				// none is cheaper, and the cheapest is the grid point
				// nearest b*.
				bestB, best := 0.0, math.Inf(1)
				for k := -30000; k <= 30000; k++ {
					b := opt * math.Exp(float64(k)*1e-4)
					if f := tc.cost.At(d, b); f < best {
						bestB, best = b, f
					}
				}
				if best < fOpt*(1-1e-12) {
					t.Fatalf("grid batch %v costs %v < At(Optimum) = %v", bestB, best, fOpt)
				}
				if !near(bestB, opt, 1e-4) {
					t.Fatalf("grid minimiser %v, Optimum %v", bestB, opt)
				}
			})
		}
	}
	if got := (sizing.Cost{}).Optimum(0); got != 0 {
		t.Fatalf("Optimum(0) = %v, want 0", got)
	}
}

func near(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

func TestConfigErrors(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name string
		c    sizing.Config
	}{
		{"negative order cost", sizing.Config{Cost: sizing.Cost{OrderCost: -1}}},
		{"NaN strand penalty", sizing.Config{Cost: sizing.Cost{StrandPenalty: nan}}},
		{"infinite order cost", sizing.Config{Cost: sizing.Cost{OrderCost: math.Inf(1)}}},
		{"min below 1", sizing.Config{Min: 0.5}},
		{"max below min", sizing.Config{Min: 10, Max: 5}},
		{"max above MaxBatch", sizing.Config{Max: sizing.MaxBatch + 1}},
		{"no whole batch", sizing.Config{Min: 2.2, Max: 2.8}},
		{"initial below min", sizing.Config{Min: 4, Initial: 2}},
		{"initial above max", sizing.Config{Max: 10, Initial: 11}},
		{"NaN initial", sizing.Config{Initial: nan}},
		{"negative rate", sizing.Config{LearningRate: -1}},
		{"infinite rate", sizing.Config{LearningRate: math.Inf(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := sizing.NewLeaseSizer(tc.c); !errors.Is(err, sizing.ErrInvalidConfig) {
				t.Fatalf("NewLeaseSizer: %v, want ErrInvalidConfig", err)
			}
			if _, err := sizing.NewPredictiveSizer(tc.c, 0); !errors.Is(err, sizing.ErrInvalidConfig) {
				t.Fatalf("NewPredictiveSizer: %v, want ErrInvalidConfig", err)
			}
		})
	}
	for _, eta := range []float64{-1, nan, math.Inf(1)} {
		if _, err := sizing.NewPredictiveSizer(sizing.Config{}, eta); !errors.Is(err, sizing.ErrInvalidConfig) {
			t.Fatalf("eta %v: %v, want ErrInvalidConfig", eta, err)
		}
	}
}

// TestDefaults: the zero Config leases batches of 1 first, and Initial
// starts where it says.
func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    sizing.Config
		want int64
	}{
		{"zero config", sizing.Config{}, 1},
		{"min", sizing.Config{Min: 3.5}, 4},
		{"initial", sizing.Config{Initial: 64}, 64},
		{"initial rounds", sizing.Config{Initial: 9.4}, 9},
		{"fractional max", sizing.Config{Initial: 7.9, Max: 7.9}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sizing.NewLeaseSizer(tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Batch(); got != tc.want {
				t.Fatalf("Batch = %d, want %d", got, tc.want)
			}
			p, err := sizing.NewPredictiveSizer(tc.c, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Batch(math.NaN()); got != tc.want {
				t.Fatalf("PredictiveSizer.Batch(NaN) = %d, want %d", got, tc.want)
			}
		})
	}
}
