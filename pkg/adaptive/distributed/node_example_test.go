package distributed_test

import (
	"context"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Two nodes split one backend whose local limits say 8: the first alone
// gets all of it, and gives half back when the second joins.
func ExampleNode() {
	coord := distributed.NewMemory()
	newNode := func(id string) *distributed.Node {
		ctrl, err := adaptive.NewAIMD(adaptive.AIMDConfig{MinLimit: 1, MaxLimit: 8, InitialLimit: 8})
		if err != nil {
			panic(err)
		}
		gate, err := adaptive.NewGate(adaptive.GateConfig{Name: "checkout", Controller: ctrl})
		if err != nil {
			panic(err)
		}
		n, err := distributed.NewNode(gate, distributed.NodeConfig{Node: id, Gate: "checkout", Coordinator: coord})
		if err != nil {
			panic(err)
		}
		return n // in a server: go n.Run(ctx)
	}
	t0 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := newNode("pod-a"), newNode("pod-b")
	ctx := context.Background()

	a.Beat(ctx, t0)
	fmt.Println("a alone:", a.Stats(t0).Ceiling)
	b.Beat(ctx, t0)
	a.Beat(ctx, t0)
	b.Beat(ctx, t0)
	fmt.Println("a, b:", a.Stats(t0).Ceiling, b.Stats(t0).Ceiling)
	if l, ok := b.TryAcquire(t0); ok {
		l.Release(t0.Add(20*time.Millisecond), adaptive.OK)
	}
	// Output:
	// a alone: 8
	// a, b: 4 4
}
