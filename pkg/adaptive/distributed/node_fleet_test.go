package distributed_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Nodes of one gate on a Memory coordinator, driven by a random schedule of
// beats, admissions, releases, pauses (leases running out, records
// evicted) and restarts (a new process under the same nodeId, refused
// while the old record lives). With every local limit equal, L_global is
// constant and Σ ceilings ≤ L_global at every step. With local limits
// changing, L_global moves under shares granted against an older one, so
// the bound is the core's: each node's ceiling ≤ the share its live record
// holds, at every step, and Σ ceilings ≤ L_global once every node has beaten
// twice since the last change.
func TestNodesShareTheGlobalCeiling(t *testing.T) {
	for _, vary := range []bool{false, true} {
		for _, handoff := range []bool{false, true} {
			for nodes := 2; nodes <= 3; nodes++ {
				for seed := range uint64(20) {
					runFleet(t, fmt.Sprintf("vary=%v/handoff=%v/nodes=%d/seed=%d", vary, handoff, nodes, seed), nodes, vary, handoff, seed)
				}
			}
		}
	}
}

func runFleet(t *testing.T, name string, size int, vary, handoff bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	coord := distributed.NewMemory()
	type member struct {
		knob   *limitKnob
		node   *distributed.Node
		leases []distributed.Lease
	}
	local := 1 + rng.IntN(12)
	fleet := make([]*member, size)
	start := func(i int) {
		m := &member{knob: newKnob(local)}
		if vary {
			m.knob = newKnob(1 + rng.IntN(12))
		}
		m.node = newTestNode(t, newTestGate(t, m.knob), distributed.NodeConfig{
			Node: fmt.Sprintf("n%d", i), Coordinator: coord, Fleet: distributed.Config{Handoff: handoff}})
		fleet[i] = m
	}
	for i := range fleet {
		start(i)
	}
	now, global := nodeT0, 0
	beat := func(m *member) {
		if g, err := m.node.Beat(context.Background(), now); err == nil && g.Status == distributed.Granted {
			global = g.Global
		} else if err != nil && !errors.Is(err, distributed.ErrDuplicateNode) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	sum := func() int {
		s := 0
		for _, m := range fleet {
			s += m.node.Stats(now).Ceiling
		}
		return s
	}
	for step := range 400 {
		i := rng.IntN(size)
		m := fleet[i]
		switch op := rng.IntN(20); {
		case op < 6:
			beat(m)
		case op < 12:
			if l, ok := m.node.TryAcquire(now); ok {
				m.leases = append(m.leases, l)
			}
		case op < 16:
			if len(m.leases) > 0 {
				k := rng.IntN(len(m.leases))
				m.leases[k].Release(now, adaptive.OK)
				m.leases = append(m.leases[:k], m.leases[k+1:]...)
			}
		case op < 17:
			start(i) // the old process is gone, its leases with it
		case op < 18 && vary:
			m.knob.limit.Store(int64(1 + rng.IntN(12)))
		default:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		}
		if !vary {
			if s := sum(); s > global {
				t.Fatalf("%s step %d: Σ ceilings %d > L_global %d", name, step, s, global)
			}
			continue
		}
		held := map[string]int{}
		for _, r := range coord.Records("checkout") {
			if r.ExpiresAt > now.UnixMicro() {
				held[r.Node+"/"+r.Instance] = r.Share
			}
		}
		for _, m := range fleet {
			if c, h := m.node.Stats(now).Ceiling, held[m.node.ID()+"/"+m.node.Instance()]; c > h {
				t.Fatalf("%s step %d: %s's ceiling %d above its live record's share %d", name, step, m.node.ID(), c, h)
			}
		}
		if step%50 == 49 {
			for range 2 {
				for _, m := range fleet {
					beat(m)
				}
			}
			if s := sum(); s > global {
				t.Fatalf("%s step %d, after two rounds: Σ ceilings %d > L_global %d", name, step, s, global)
			}
		}
	}
}

// Four nodes share a healthy backend (every request fast and OK) through
// AIMD gates starting at 8: each node admits up to its share, a quarter of
// L_global, and the fleet keeps its shares full. Each controller must see
// its node as fully used — the backend carries the fleet's load, not the
// node's — so L_local, and with it L_global, grows. Were samples judged
// against L_local, a node at its share would look a quarter used and no
// limit could ever grow past where it started.
func TestFleetLimitGrowsWhenSharesAreFull(t *testing.T) {
	coord := distributed.NewMemory()
	var nodes []*distributed.Node
	for i := range 4 {
		ctl, err := adaptive.NewAIMD(adaptive.AIMDConfig{InitialLimit: 8, MaxLimit: 64})
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, newTestNode(t, newTestGate(t, ctl), distributed.NodeConfig{
			Node: fmt.Sprintf("n%d", i), Coordinator: coord, Fleet: distributed.Config{Handoff: true}}))
	}
	now := nodeT0
	var global int
	for range 40 { // rounds: every node beats, fills its share, and completes it
		for _, n := range nodes {
			g, err := n.Beat(context.Background(), now)
			if err != nil {
				t.Fatal(err)
			}
			global = g.Global
		}
		for _, n := range nodes {
			var held []distributed.Lease
			for {
				l, ok := n.TryAcquire(now)
				if !ok {
					break
				}
				held = append(held, l)
			}
			for _, l := range held {
				l.Release(now.Add(5*time.Millisecond), adaptive.OK)
			}
		}
		now = now.Add(100 * time.Millisecond)
	}
	if global < 32 {
		t.Fatalf("L_global %d after 40 full rounds, want it grown well past the initial 8", global)
	}
}

// A node keeps its L_local within a quarter of L_global either side: a
// node's controller counts its in flight in units of its own limit (scaled
// from its share), and without the band the nodes' limits drift apart
// (make bench-gate: 14, 18, 33 and 73 under an L_global of 34), a node
// below its share admits under its own L_local, and one far above finds
// its knee in units of its own. Inside the band a node's limit is its own.
func TestNodeKeepsLocalNearTheFleet(t *testing.T) {
	for _, tc := range []struct {
		name       string
		a, b       int // the two nodes' initial limits
		wantA      int // a's limit after a's beat: L_global is ⌊(a+b)/2⌋
		wantGlobal int
	}{
		{"far above: to the band's top", 64, 8, 45, 36},
		{"far below: to the band's bottom", 8, 64, 27, 36},
		{"inside the band: its own", 40, 32, 40, 36},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := distributed.NewMemory()
			mk := func(id string, initial int) (*adaptive.Gate, *distributed.Node) {
				ctl, err := adaptive.NewAIMD(adaptive.AIMDConfig{InitialLimit: initial, MaxLimit: 100})
				if err != nil {
					t.Fatal(err)
				}
				g := newTestGate(t, ctl)
				return g, newTestNode(t, g, distributed.NodeConfig{Node: id, Coordinator: coord, Fleet: distributed.Config{Aggregate: distributed.Mean}})
			}
			ga, a := mk("a", tc.a)
			_, b := mk("b", tc.b)
			if _, err := b.Beat(context.Background(), nodeT0); err != nil {
				t.Fatal(err)
			}
			g, err := a.Beat(context.Background(), nodeT0)
			if err != nil {
				t.Fatal(err)
			}
			if g.Global != tc.wantGlobal {
				t.Fatalf("L_global %d, want %d", g.Global, tc.wantGlobal)
			}
			if l := ga.Limit(); l != tc.wantA {
				t.Fatalf("a's limit %d after its beat under L_global %d, want %d", l, g.Global, tc.wantA)
			}
		})
	}
}

// A node reports its controller's estimate, not a recalibration's pin: the
// pin (a quarter of the limit, every 15 s by default) re-measures the
// no-load RTT and says nothing of the backend's limit. Reported, it took
// three quarters of the node's part off L_global under mean for as long
// as the pin lasted, and with sidecars started together they pinned
// together. The pin still caps what the node admits.
func TestNodeReportsTheLevelNotThePin(t *testing.T) {
	coord := distributed.NewMemory()
	ctl, err := adaptive.NewAIMD(adaptive.AIMDConfig{InitialLimit: 40, MaxLimit: 100,
		Recalibration: adaptive.Recalibration{Interval: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	g := newTestGate(t, ctl)
	n := newTestNode(t, g, distributed.NodeConfig{Node: "a", Coordinator: coord, Fleet: distributed.Config{Aggregate: distributed.Mean}})
	if _, err := n.Beat(context.Background(), nodeT0); err != nil {
		t.Fatal(err)
	}
	// The first answer schedules the recalibration a second on; the first
	// answer after that pins the limit.
	for _, at := range []time.Duration{time.Millisecond, 2 * time.Second} {
		if _, err := n.Beat(context.Background(), nodeT0.Add(at)); err != nil { // a live grant
			t.Fatal(err)
		}
		l, ok := n.TryAcquire(nodeT0.Add(at))
		if !ok {
			t.Fatalf("refused at %v", at)
		}
		l.Release(nodeT0.Add(at+time.Millisecond), adaptive.OK)
	}
	pin := g.Limit() // a quarter of what was in flight, 1, at least MinLimit
	if pin >= 40 {
		t.Fatalf("limit %d after the recalibration began, want it pinned below 40", pin)
	}
	gr, err := n.Beat(context.Background(), nodeT0.Add(2*time.Second+2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if gr.Global != 40 {
		t.Fatalf("L_global %d with the only node pinned for a recalibration, want its level, 40", gr.Global)
	}
	if st := n.Stats(nodeT0.Add(2*time.Second + 3*time.Millisecond)); st.Ceiling != pin {
		t.Fatalf("the node's ceiling %d while pinned, want the pin, %d", st.Ceiling, pin)
	}
}
