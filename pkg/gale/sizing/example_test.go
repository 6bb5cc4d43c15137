package sizing_test

import (
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

// A node serving about 800 requests per window, where a store round trip
// costs as much as stranding one credit: the optimum is √(2·800) = 40. The
// sizer starts at batches of 1 and learns it.
func Example() {
	cost := sizing.Cost{OrderCost: 1, StrandPenalty: 1}
	fmt.Printf("b* = %.0f, f(b*) = %.0f, f(1) = %.0f\n", cost.Optimum(800), cost.At(800, cost.Optimum(800)), cost.At(800, 1))

	s, err := sizing.NewLeaseSizer(sizing.Config{Cost: cost, Max: 10000})
	if err != nil {
		panic(err)
	}
	for w := 1; w <= 300; w++ {
		if w == 1 || w == 300 {
			fmt.Printf("window %d: batch %d\n", w, s.Batch())
		}
		s.Observe(800) // the window's served demand
	}
	// Output:
	// b* = 40, f(b*) = 40, f(1) = 800
	// window 1: batch 1
	// window 300: batch 40
}

// With a demand forecast, PredictiveSizer follows it while it is right.
func ExamplePredictiveSizer() {
	p, err := sizing.NewPredictiveSizer(sizing.Config{Max: 10000}, 0)
	if err != nil {
		panic(err)
	}
	var demand []float64
	for range 10 {
		demand = append(demand, 200, 200, 5000, 5000, 200, 5000, 200, 200)
	}
	for w, d := range demand {
		b := p.Batch(d) // an accurate forecast
		if w >= len(demand)-3 {
			fmt.Printf("demand %4.0f: batch %d\n", d, b)
		}
		p.Observe(d)
	}
	follow, _ := p.Weights()
	fmt.Printf("weight on the forecast: %.2f\n", follow)
	// Output:
	// demand 5000: batch 100
	// demand  200: batch 20
	// demand  200: batch 20
	// weight on the forecast: 1.00
}
