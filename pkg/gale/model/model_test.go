package model

import (
	"fmt"
	"testing"
)

// The parameters of the bound checks: Limit 9, Batch 3, over 4 windows, for
// N ∈ {1, 2, 4, 8}. Four windows are the fewest in which eight nodes can all
// carry Batch−1 credits into one window: each carry needs a full grant of
// Batch, a window holds Limit/Batch = 3 of them, and the last window is the
// one the carries land in. With nodes collapsed by symmetry the largest space
// (N = 8, detached leases) has under 20,000 states.
const (
	boundLimit   = 9
	boundBatch   = 3
	boundWindows = 4
)

// pinned is one explored space: the counts are pinned so that any change to
// the model — a transition added, dropped or altered — shows up here.
type pinned struct {
	nodes       int
	coupled     bool
	detached    bool
	states      int
	transitions int
	maxAdmitted int
}

var pinnedSpaces = []pinned{
	{1, false, false, 109, 175, 11},
	{2, false, false, 328, 816, 13},
	{4, false, false, 1155, 4835, 17},
	{8, false, false, 3727, 27492, 25},
	{1, true, false, 40, 66, 9},
	{2, true, false, 64, 160, 9},
	{4, true, false, 80, 300, 9},
	{8, true, false, 80, 460, 9},
	{1, false, true, 187, 303, 12},
	{2, false, true, 745, 1885, 15},
	{4, false, true, 3785, 16230, 21},
	{8, false, true, 18850, 143154, 33},
	{1, true, true, 52, 87, 9},
	{2, true, true, 100, 255, 9},
	{4, true, true, 140, 525, 9},
	{8, true, true, 140, 765, 9},
}

func (p pinned) config() Config {
	return Config{Nodes: p.nodes, Limit: boundLimit, Batch: boundBatch, Windows: boundWindows, Coupled: p.coupled, DetachedLease: p.detached}
}

func (p pinned) name() string {
	mode := "uncoupled"
	if p.coupled {
		mode = "coupled"
	}
	if p.detached {
		mode += "/detached"
	}
	return fmt.Sprintf("N=%d/%s", p.nodes, mode)
}

// explore explores p's space and checks its pinned counts.
func explore(t *testing.T, p pinned) *Space {
	t.Helper()
	sp, err := Explore(p.config())
	if err != nil {
		t.Fatal(err)
	}
	if sp.States() != p.states || sp.Transitions() != p.transitions {
		t.Errorf("explored %d states and %d transitions, pinned %d and %d: the model changed", sp.States(), sp.Transitions(), p.states, p.transitions)
	}
	return sp
}

// admittedAtMost is the invariant "no window admits more than bound".
func admittedAtMost(bound int) func(State) bool {
	return func(s State) bool { return s.Admitted <= bound }
}

// TestUncoupledBound checks seed 04's baseline bound: uncoupled leasing admits
// at most Limit + N·(Batch−1) in any window, and the bound is tight — the
// invariant one below it is violated, with a counter-example trace.
func TestUncoupledBound(t *testing.T) {
	for _, p := range pinnedSpaces {
		if p.coupled || p.detached {
			continue
		}
		t.Run(p.name(), func(t *testing.T) {
			sp := explore(t, p)
			bound := p.config().UncoupledBound()
			if sp.MaxAdmitted() != bound {
				t.Fatalf("max admitted %d, want exactly Limit + N·(Batch−1) = %d", sp.MaxAdmitted(), bound)
			}
			if tr, bad := sp.Find(admittedAtMost(bound)); bad {
				t.Fatalf("the bound is violated:\n%v", tr)
			}
			tr, bad := sp.Find(admittedAtMost(bound - 1))
			if !bad {
				t.Fatalf("admitted ≤ %d holds: the bound is not tight", bound-1)
			}
			checkTrace(t, p.config(), tr)
			if got := tr.Last().Admitted; got != bound {
				t.Fatalf("the counter-example ends at %d admitted, want %d", got, bound)
			}
			t.Logf("counter-example to admitted ≤ %d (%d steps):\n%v", bound-1, len(tr.Steps), tr)
		})
	}
}

// TestCoupledBound checks the window-coupled bound: admitted ≤ Limit in every
// window for every N, and Limit is reached.
func TestCoupledBound(t *testing.T) {
	for _, p := range pinnedSpaces {
		if !p.coupled || p.detached {
			continue
		}
		t.Run(p.name(), func(t *testing.T) {
			sp := explore(t, p)
			if tr, bad := sp.Find(admittedAtMost(boundLimit)); bad {
				t.Fatalf("a window admits more than Limit %d:\n%v", boundLimit, tr)
			}
			if sp.MaxAdmitted() != boundLimit {
				t.Fatalf("max admitted %d, want exactly Limit %d", sp.MaxAdmitted(), boundLimit)
			}
		})
	}
}

// TestDetachedLease shows what the uncoupled bound rests on: the check that
// asked for a lease spends one of its credits. When a lease can land on its
// own (a LowWater refill, or a lease in flight across a boundary), a node can
// carry a whole batch and the reach is Limit + N·Batch; window-coupling still
// holds every window to Limit.
func TestDetachedLease(t *testing.T) {
	for _, p := range pinnedSpaces {
		if !p.detached {
			continue
		}
		t.Run(p.name(), func(t *testing.T) {
			sp := explore(t, p)
			want := boundLimit + p.nodes*boundBatch
			if p.coupled {
				want = boundLimit
			}
			if sp.MaxAdmitted() != want {
				t.Fatalf("max admitted %d, want %d", sp.MaxAdmitted(), want)
			}
		})
	}
}

// checkTrace replays tr with Next from the initial state, step by step.
func checkTrace(t *testing.T, c Config, tr Trace) {
	t.Helper()
	cur := tr.Initial
	for i, ts := range tr.Steps {
		ok := false
		for _, n := range c.Next(cur) {
			if n.Step == ts.Step && c.key(n.After) == c.key(ts.After) {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("step %d (%v) is not a transition of %v", i, ts.Step, cur)
		}
		cur = ts.After
	}
}

// TestTraceReplaysEveryState checks Trace's undoing of the node symmetry: the
// concrete path to every canonical state is a run of the protocol and ends
// in that state up to the order of the nodes.
func TestTraceReplaysEveryState(t *testing.T) {
	for _, p := range pinnedSpaces[:3] {
		checkEveryTrace(t, p.name(), explore(t, p))
	}
}

// checkEveryTrace checks that the trace to every state of sp replays and
// ends in that state up to the order of the nodes.
func checkEveryTrace(t *testing.T, name string, sp *Space) {
	t.Helper()
	c := sp.Config()
	for i := range sp.States() {
		tr := sp.Trace(i)
		checkTrace(t, c, tr)
		got, want := tr.Last(), sp.State(i)
		c.sortNodes(got)
		if c.key(got) != c.key(want) {
			t.Fatalf("%s: trace to state %d ends in %v, want %v", name, i, got, want)
		}
	}
}

// TestSymmetryMatchesNaive checks the symmetry reduction against an explorer
// that does not use it: the same set of states up to permutation, and the
// same maximum.
func TestSymmetryMatchesNaive(t *testing.T) {
	for _, c := range []Config{
		{Nodes: 3, Limit: 5, Batch: 2, Windows: 3},
		{Nodes: 3, Limit: 5, Batch: 2, Windows: 3, Coupled: true},
		{Nodes: 3, Limit: 4, Batch: 3, Windows: 3, DetachedLease: true},
	} {
		checkNaive(t, c)
	}
}

// checkNaive explores c with and without the symmetry reduction and checks
// that they agree: the same states up to permutation, the same maximum.
// Both leave Deny steps out, as Explore does.
func checkNaive(t *testing.T, c Config) {
	t.Helper()
	sp, err := Explore(c)
	if err != nil {
		t.Fatal(err)
	}
	naive := map[string]State{c.key(c.Initial()): c.Initial()}
	queue := []State{c.Initial()}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, n := range c.Next(s) {
			if n.Step.Kind == Deny {
				continue
			}
			if k := c.key(n.After); naive[k].Nodes == nil {
				naive[k] = n.After
				queue = append(queue, n.After)
			}
		}
	}
	classes, most := map[string]bool{}, 0
	for _, s := range naive {
		s = s.clone()
		c.sortNodes(s)
		classes[c.key(s)] = true
		most = max(most, s.Admitted)
	}
	if len(classes) != sp.States() || most != sp.MaxAdmitted() {
		t.Errorf("%+v: naive %d classes (of %d states), max %d; explorer %d states, max %d", c, len(classes), len(naive), most, sp.States(), sp.MaxAdmitted())
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{},
		{Nodes: 17, Limit: 4, Batch: 2, Windows: 2},
		{Nodes: 2, Limit: 101, Batch: 2, Windows: 2},
		{Nodes: 2, Limit: 4, Batch: 5, Windows: 2},
		{Nodes: 2, Limit: 4, Batch: 0, Windows: 2},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 0},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, LowWater: 2},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, LowWater: -1},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, Refunds: 4},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, NegativeHits: 4},
	} {
		if _, err := Explore(c); err == nil {
			t.Errorf("Explore(%+v) accepted an invalid config", c)
		}
	}
}

// TestGiveUps explores checks that give up on the lease they began, before
// it lands or as it lands (the abandoned-lease case that once let a node
// carry a whole batch): the limiter drops, uncoupled, the credits the check
// needed, so Limit + N·(Batch−1) holds and is reached; window-coupled,
// Limit. Without telling the machine (DetachedLease: the lease lands alone)
// the uncoupled reach is Limit + N·Batch, as TestDetachedLease shows.
func TestGiveUps(t *testing.T) {
	for _, tc := range []struct {
		nodes   int
		coupled bool
		states  int // pinned
	}{
		{1, false, 267}, {2, false, 950}, {4, false, 5105},
		{1, true, 72}, {2, true, 192}, {4, true, 672},
	} {
		c := Config{Nodes: tc.nodes, Limit: boundLimit, Batch: boundBatch, Windows: boundWindows, Coupled: tc.coupled, GiveUps: true}
		t.Run(fmt.Sprintf("N=%d/coupled=%v", tc.nodes, tc.coupled), func(t *testing.T) {
			sp, err := Explore(c)
			if err != nil {
				t.Fatal(err)
			}
			bound := boundLimit
			if !tc.coupled {
				bound = c.UncoupledBound()
			}
			if tr, bad := sp.Find(admittedAtMost(bound)); bad {
				t.Fatalf("a window admits more than %d:\n%v", bound, tr)
			}
			if sp.MaxAdmitted() != bound {
				t.Fatalf("max admitted %d, want exactly %d", sp.MaxAdmitted(), bound)
			}
			if sp.States() != tc.states {
				t.Errorf("explored %d states, pinned %d: the model changed", sp.States(), tc.states)
			}
		})
	}
}
