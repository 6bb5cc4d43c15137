package model

import (
	"flag"
	"fmt"
	"testing"
)

var large = flag.Bool("large", false, "also explore the larger spaces (minutes with -race)")

// space is one explored configuration and its pinned counts: a change to
// the protocol, to Beat or to the model shows up as a changed count.
type space struct {
	c           Config
	states      int
	transitions int
	large       bool // explored only with -large
}

func (sp space) name() string {
	c := sp.c
	name := fmt.Sprintf("N=%d/L=%d/flight=%d", c.Nodes, c.Global, c.Flight)
	if c.Handoff {
		name += "/handoff"
	}
	if c.Lossy {
		name += "/lossy"
	}
	if c.Torn {
		name += "/torn"
	}
	if c.Mutation != Faithful {
		name += "/" + c.Mutation.String()
	}
	return name
}

// check explores sp's configuration, checks its pinned counts and that the
// traces to the states it reports replay.
func check(t *testing.T, sp space) *Result {
	t.Helper()
	if sp.large && !*large {
		t.Skip("a larger space: run with -args -large")
	}
	r, err := Check(sp.c, 5_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Space.States() != sp.states || r.Space.Transitions() != sp.transitions {
		t.Errorf("explored %d states and %d transitions, pinned %d and %d: the protocol or the model changed",
			r.Space.States(), r.Space.Transitions(), sp.states, sp.transitions)
	}
	for _, i := range []int{r.MaxInflightAt, r.GlobalCapBroken, r.InflightCapBroken, r.Space.States() - 1} {
		if i >= 0 {
			checkTrace(t, r, i)
		}
	}
	return r
}

// checkTrace checks that the trace to state i replays, on the concrete
// protocol, to a state with i's key.
func checkTrace(t *testing.T, r *Result, i int) {
	t.Helper()
	tr := r.Trace(i)
	want := r.Config.key(nil, r.stateAt(i))
	if got := r.Config.key(nil, tr.Last()); string(got) != string(want) {
		t.Fatalf("the trace to state %d ends in another state:\n%v", i, tr)
	}
}

// stateAt returns state i, by replaying the path to it.
func (r *Result) stateAt(i int) State {
	states, err := Replay(r.Config.Graph(), r.Space.Path(i))
	if err != nil {
		panic(err)
	}
	if len(states) == 0 {
		return r.Config.Initial()
	}
	return states[len(states)-1]
}

var handoffSpaces = []space{
	{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true}, 1160, 3890, false},
	{Config{Nodes: 2, Global: 3, Flight: 1, Handoff: true}, 3134, 11542, false},
	{Config{Nodes: 2, Global: 4, Flight: 1, Handoff: true}, 7887, 31846, false},
	{Config{Nodes: 2, Global: 2, Flight: 2, Handoff: true}, 72699, 381080, false},
	{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Lossy: true}, 3422, 16174, false},
	{Config{Nodes: 3, Global: 2, Flight: 1, Handoff: true}, 14837, 65115, false},
	{Config{Nodes: 3, Global: 3, Flight: 1, Handoff: true}, 55863, 273297, false},
	{Config{Nodes: 2, Global: 3, Flight: 2, Handoff: true}, 249797, 1401836, true},
	{Config{Nodes: 2, Global: 2, Flight: 2, Handoff: true, Lossy: true}, 263847, 2189346, true},
	{Config{Nodes: 3, Global: 2, Flight: 1, Handoff: true, Lossy: true}, 65903, 419344, true},
	{Config{Nodes: 3, Global: 2, Flight: 2, Handoff: true}, 4595690, 32887815, true},
}

// TestHandoffKeepsBothCaps checks the claim of acknowledged handoff, on
// every reachable state of every space: Σ recorded share ≤ L (GlobalCap)
// and Σ actual in flight ≤ L (InflightCap), under reporting lag, grant
// replies delivered in any order and, lossy, lost messages. It checks the
// inductive reason as well — every node's in flight count is within the
// reserve its record holds, and Σ reserve ≤ L — and that L is reached, so
// that it is the least bound.
func TestHandoffKeepsBothCaps(t *testing.T) {
	for _, sp := range handoffSpaces {
		t.Run(sp.name(), func(t *testing.T) {
			t.Parallel()
			r := check(t, sp)
			L := sp.c.Global
			if i := r.GlobalCapBroken; i >= 0 {
				t.Fatalf("Σ share > %d:\n%v", L, r.Trace(i))
			}
			if i := r.InflightCapBroken; i >= 0 {
				t.Fatalf("Σ inflight > %d:\n%v", L, r.Trace(i))
			}
			if i := r.ReserveCapBroken; i >= 0 {
				t.Fatalf("Σ reserve > %d:\n%v", L, r.Trace(i))
			}
			if i := r.UncoveredAt; i >= 0 {
				t.Fatalf("a node holds more in flight than its reserve:\n%v", r.Trace(i))
			}
			if r.MaxInflight != L || r.MaxShares != L {
				t.Fatalf("max Σ inflight %d, max Σ share %d: want both to reach L = %d", r.MaxInflight, r.MaxShares, L)
			}
		})
	}
}

var noHandoffSpaces = []space{
	{Config{Nodes: 2, Global: 2, Flight: 1}, 2822, 10362, false},
	{Config{Nodes: 2, Global: 3, Flight: 1}, 11045, 44128, false},
	{Config{Nodes: 2, Global: 4, Flight: 1}, 31105, 133002, false},
	{Config{Nodes: 3, Global: 2, Flight: 1}, 113574, 567795, false},
	{Config{Nodes: 2, Global: 2, Flight: 2}, 85673, 473570, true},
	{Config{Nodes: 2, Global: 3, Flight: 2}, 469377, 2766582, true},
	{Config{Nodes: 3, Global: 3, Flight: 1}, 819347, 4433976, true},
}

// TestWithoutHandoffOvershoots checks what the occupancy cap alone keeps:
// Σ share ≤ L in every state, and Σ in flight only ≤ NoHandoffBound —
// which every space reaches: L + ⌈L/2⌉ for two nodes (1.5 × L for an even
// L), 2 × L for three nodes at L = 2 and 3. The shortest overshoot and the
// run to the maximum are logged.
func TestWithoutHandoffOvershoots(t *testing.T) {
	for _, sp := range noHandoffSpaces {
		t.Run(sp.name(), func(t *testing.T) {
			t.Parallel()
			r := check(t, sp)
			L := sp.c.Global
			if i := r.GlobalCapBroken; i >= 0 {
				t.Fatalf("Σ share > %d:\n%v", L, r.Trace(i))
			}
			if r.InflightCapBroken < 0 {
				t.Fatalf("Σ inflight ≤ %d everywhere: the overshoot is gone", L)
			}
			if want := NoHandoffBound(sp.c.Nodes, L); r.MaxInflight != want {
				t.Fatalf("max Σ inflight %d, want Σ⌈L/k⌉ = %d:\n%v", r.MaxInflight, want, r.Trace(r.MaxInflightAt))
			}
			t.Logf("shortest overshoot (%d steps):\n%v", r.Space.Depth(r.InflightCapBroken), r.Trace(r.InflightCapBroken))
			t.Logf("shortest run to max Σ inflight %d = %.2f × L:\n%v", r.MaxInflight, float64(r.MaxInflight)/float64(L), r.Trace(r.MaxInflightAt))
		})
	}
}
