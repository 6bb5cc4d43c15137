package fair_test

import (
	"context"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/fair"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

func Example() {
	// 100 units a minute, a guaranteed 75 and b 25.
	e, err := fair.New(fair.Config{Limit: 100, Window: time.Minute, Weights: map[string]float64{"a": 3, "b": 1}})
	if err != nil {
		panic(err)
	}
	t0 := time.Unix(1_699_999_980, 0) // a minute boundary
	decide := func(now time.Time, tenant string, cost int64) {
		d := e.Decide(tenant, cost, now)
		fmt.Printf("%s %2d: %-6v admitted %3d, borrowed %2d, %3d left\n", tenant, cost, d.Reason, d.Admitted, d.Borrowed, d.Remaining)
	}
	// Window 1: b comes first and borrows a's unclaimed share.
	decide(t0, "b", 50)
	decide(t0, "a", 50)
	decide(t0, "a", 25)
	// Window 2: b's demand of window 1 keeps its 25 claimed, though a
	// floods first.
	t1 := t0.Add(time.Minute)
	decide(t1, "a", 80)
	decide(t1, "a", 75)
	decide(t1, "b", 25)
	decide(t1, "b", 1)
	fmt.Println(e.Shares())
	// Output:
	// b 50: borrow admitted  50, borrowed 25,  50 left
	// a 50: share  admitted  50, borrowed  0,   0 left
	// a 25: cap    admitted  50, borrowed  0,   0 left
	// a 80: denied admitted   0, borrowed  0, 100 left
	// a 75: share  admitted  75, borrowed  0,  25 left
	// b 25: share  admitted  25, borrowed  0,   0 left
	// b  1: cap    admitted  25, borrowed  0,   0 left
	// map[a:75 b:25]
}

func ExampleWaterFill() {
	// 100 units; a wants 10, b and c want 100 each, c weighs twice b.
	fmt.Println(fair.WaterFill(100, []float64{10, 100, 100}, []float64{1, 1, 2}))
	// Output: [10 30 60]
}

func ExampleShared() {
	// Two processes share 10 units a minute through one store, leasing 4 at
	// a time.
	store := memstore.New()
	cfg := fair.Config{Limit: 10, Window: time.Minute}
	p1, _ := fair.NewShared(cfg, store, "api", 4)
	p2, _ := fair.NewShared(cfg, store, "api", 4)
	ctx, now := context.Background(), time.Unix(1_699_999_980, 0)
	var admitted int
	for range 10 {
		for _, p := range []*fair.Shared{p1, p2} {
			if d, err := p.Decide(ctx, "tenant", 1, now); err == nil && d.Allowed {
				admitted++
			}
		}
	}
	fmt.Println("admitted:", admitted)
	// Output: admitted: 10
}
