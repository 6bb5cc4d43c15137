package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const distributedGate = `
concurrency:
  - name: backend
    match: {path_prefix: /}
    controller: aimd
    min_limit: 10
    max_limit: 10
    initial_limit: 10
    distributed: {coordinator: redis, heartbeat: 1s}
`

// sidecarEngine is one sidecar's engine whose distributed gates beat to
// coord on clk.
func sidecarEngine(t *testing.T, name string, coord distributed.Coordinator, clk *clock.Fake) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Options{Store: memstore.New(), Clock: clk,
		Distributed: func(spec *policy.Gate, gate *adaptive.Gate) (*distributed.Node, error) {
			return distributed.NewNode(gate, distributed.NodeConfig{Node: name, Gate: spec.Name, Coordinator: coord,
				Fleet: distributed.Config{LeaseTTL: spec.Distributed.LeaseTTL}, Heartbeat: spec.Distributed.Heartbeat, Clock: clk})
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(bg) })
	return e
}

// beats is a coordinator that reports each heartbeat it answered.
type beats struct {
	distributed.Coordinator
	done chan string
}

func (b *beats) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	g, err := b.Coordinator.Heartbeat(ctx, gate, rep, cfg, now)
	b.done <- rep.Node
	return g, err
}

// Leave passes a node's leave on.
func (b *beats) Leave(ctx context.Context, gate, node, instance string) (bool, error) {
	return b.Coordinator.(distributed.Leaver).Leave(ctx, gate, node, instance)
}

// wait waits for n heartbeats, for at most 10 s.
func (b *beats) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-b.done:
		case <-timeout:
			t.Fatalf("fewer than %d heartbeats in 10s", n)
		}
	}
}

// round moves clk one heartbeat on, once the running nodes' tickers are
// armed, and waits for each of them to beat.
func (b *beats) round(t *testing.T, clk *clock.Fake, nodes int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := clk.WaitForWaiters(ctx, nodes); err != nil {
		t.Fatalf("the nodes' tickers: %v", err)
	}
	clk.Advance(time.Second)
	b.wait(t, nodes)
}

// TestDistributedGateSharesOneCeiling: two sidecars' engines with one
// distributed gate over one coordinator admit 10 between them, the gate's
// ceiling, not 10 each; dropping the gate on one stops its heartbeats and
// takes it out of the fleet, and the other takes the whole ceiling at its
// next beat, inside the dropped node's lease.
func TestDistributedGateSharesOneCeiling(t *testing.T) {
	coord := &beats{Coordinator: distributed.NewMemory(), done: make(chan string, 100)}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	a, b := sidecarEngine(t, "a", coord, clk), sidecarEngine(t, "b", coord, clk)
	for _, e := range []*engine.Engine{a, b} {
		if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": distributedGate})); err != nil {
			t.Fatal(err)
		}
	}
	ceiling := func(e *engine.Engine) int {
		st := e.NodeStats(clk.Now())
		if len(st) != 1 {
			return -1
		}
		return st[0].Ceiling
	}
	coord.wait(t, 2)       // each node's first beat, at Load
	coord.round(t, clk, 2) // a gives back what it took alone
	coord.round(t, clk, 2) // b is granted it
	// A round ends when the coordinator has answered; each node applies
	// its answer just after, on its own goroutine.
	if !testenv.Eventually(func() bool { return ceiling(a) == 5 && ceiling(b) == 5 }) {
		t.Fatalf("ceilings %d and %d, want 5 of 10 each", ceiling(a), ceiling(b))
	}

	admitted := 0
	var held []engine.Held
	for _, e := range []*engine.Engine{a, b} {
		c, ok := e.ChooseGate("svc", "/x", func(string) (string, bool) { return "", false })
		if !ok || c.Node == nil {
			t.Fatalf("the distributed gate was not chosen with its node: %+v", c)
		}
		for range 10 {
			h, err := c.Acquire(bg, clk.Now())
			if err != nil {
				if c.Limit(clk.Now()) != 5 {
					t.Fatalf("a rejection reports limit %d, want the share 5", c.Limit(clk.Now()))
				}
				break
			}
			held = append(held, h)
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("two sidecars admitted %d, want the one ceiling of 10", admitted)
	}
	for _, h := range held {
		h.Release(clk.Now(), adaptive.OK)
	}

	// a drops the gate: its heartbeats stop, it leaves, b takes all.
	if err := a.Load(bg, loadDir(t, map[string]string{"g.yaml": "concurrency:\n  - name: local\n    match: {path_prefix: /local}\n"})); err != nil {
		t.Fatal(err)
	}
	if st := a.NodeStats(clk.Now()); len(st) != 0 {
		t.Fatalf("a still reports a node: %+v", st)
	}
	coord.round(t, clk, 1) // one heartbeat: a's lease (two) has not ended
	if !testenv.Eventually(func() bool { return ceiling(b) == 10 }) {
		t.Fatalf("b's ceiling %d one beat after a dropped the gate, want all 10", ceiling(b))
	}
	select {
	case n := <-coord.done:
		t.Fatalf("%s beat after the rounds: a's heartbeats did not stop", n)
	default:
	}
}

// TestClosedEngineLeavesItsFleet: an engine closing (the sidecar shutting
// down after its drain) takes its nodes out of their fleets, so the other
// sidecar takes the whole ceiling at its next beat, inside the closed one's
// lease.
func TestClosedEngineLeavesItsFleet(t *testing.T) {
	mem := distributed.NewMemory()
	coord := &beats{Coordinator: mem, done: make(chan string, 100)}
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	a, b := sidecarEngine(t, "a", coord, clk), sidecarEngine(t, "b", coord, clk)
	for _, e := range []*engine.Engine{a, b} {
		if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": distributedGate})); err != nil {
			t.Fatal(err)
		}
	}
	coord.wait(t, 2)
	coord.round(t, clk, 2)
	coord.round(t, clk, 2)
	if err := a.Close(bg); err != nil {
		t.Fatal(err)
	}
	if recs := mem.Records("backend"); len(recs) != 1 || recs[0].Node != "b" {
		t.Fatalf("records after a closed: %+v, want b's alone", recs)
	}
	coord.round(t, clk, 1) // one heartbeat: a's lease (two) has not ended
	// The round ends when the coordinator has answered b's beat; b applies
	// the answer just after, on its own goroutine.
	alone := func() bool {
		st := b.NodeStats(clk.Now())
		return len(st) == 1 && st[0].Ceiling == 10 && st[0].Live == 1
	}
	if !testenv.Eventually(alone) {
		t.Fatalf("b one beat after a left: %+v, want all 10 alone", b.NodeStats(clk.Now()))
	}
}

func TestDistributedGateNeedsACoordinator(t *testing.T) {
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	err = e.Load(bg, loadDir(t, map[string]string{"g.yaml": distributedGate}))
	if err == nil || !strings.Contains(err.Error(), `gate "backend" is distributed, but this process has no coordinator for it: run serve with --redis-url`) {
		t.Fatalf("err = %v", err)
	}
}
