package model_test

import (
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/model"
)

// Two nodes share a global ceiling of 2, each with one message in flight
// at a time. Without acknowledged handoff the occupancy cap keeps Σ share
// ≤ 2 but Σ in flight reaches 3; with it, both stay ≤ 2. A node that fences
// itself a margin before its lease ends on its own clock is safe with a
// margin of D + R ticks (drift, request length), and not with one less.
func Example() {
	for _, handoff := range []bool{false, true} {
		r, err := model.Check(model.Config{Nodes: 2, Global: 2, Flight: 1, Handoff: handoff}, 0)
		if err != nil {
			panic(err)
		}
		fmt.Printf("handoff=%v: %d states, max Σ share %d, max Σ inflight %d\n", handoff, r.Space.States(), r.MaxShares, r.MaxInflight)
	}
	c := model.FenceConfig{TTL: 8, Drift: 2, Hold: 1, Beats: 1}
	for _, margin := range []int{c.MinMargin() - 1, c.MinMargin()} {
		c.Margin = margin
		r, err := model.CheckFence(c)
		if err != nil {
			panic(err)
		}
		fmt.Printf("fence margin %d: safe %v\n", margin, r.Unsafe < 0)
	}
	// Output:
	// handoff=false: 2822 states, max Σ share 2, max Σ inflight 3
	// handoff=true: 1160 states, max Σ share 2, max Σ inflight 2
	// fence margin 2: safe false
	// fence margin 3: safe true
}
