package model

import (
	"slices"
)

// Space is the explored state space of one Config: every reachable state,
// each once, in breadth-first order, with the transition that first reached
// it. It is immutable once Explore returns and safe for concurrent reads.
//
// Nodes are symmetric — they run the same protocol and nothing in a state
// depends on a node's index — so two states that differ by a permutation of
// their nodes reach the same admissions by the same steps up to renaming.
// Explore keeps one representative of each class, the canonical state whose
// Nodes are sorted ascending; the counts it reports are of these classes.
// Traces undo the renaming: they name real nodes.
type Space struct {
	cfg    Config
	states []explored // states[0] is Initial; BFS order
	edges  int
	most   int
}

// explored is one canonical state and how the search first reached it.
type explored struct {
	state State
	// parent is the index of the state this one was first reached from; -1
	// for the initial state. Invariant: parent < own index, so following
	// parents ends at 0 along a shortest path.
	parent int
	// step is the transition from parent, with Node the index of the node
	// in the parent's canonical (sorted) nodes.
	step Step
}

// Explore enumerates every state reachable from c.Initial() by Next, breadth
// first, identifying states equal up to a permutation of nodes.
func Explore(c Config) (*Space, error) { return exploreUntil(c, nil) }

// exploreUntil is Explore, stopping as soon as it reaches a state satisfying
// stop, when stop is not nil: the space of a broken protocol can be
// unbounded (a window admitting without end) where the shortest path to
// its first break is short. That state is then the last of the space, and
// Find returns the path to it.
func exploreUntil(c Config, stop func(State) bool) (*Space, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sp := &Space{cfg: c}
	seen := map[string]int{}
	add := func(s State, parent int, step Step) bool {
		k := c.key(s)
		if _, ok := seen[k]; ok {
			return false
		}
		seen[k] = len(sp.states)
		sp.states = append(sp.states, explored{state: s, parent: parent, step: step})
		sp.most = max(sp.most, s.Admitted)
		return stop != nil && stop(s)
	}
	if add(c.Initial(), -1, Step{}) {
		return sp, nil
	}
	for i := 0; i < len(sp.states); i++ { // the slice is the BFS queue
		for _, t := range c.Next(sp.states[i].state) {
			if t.Step.Kind == Deny {
				continue // a self-loop: it reaches nothing new
			}
			sp.edges++
			c.sortNodes(t.After)
			if add(t.After, i, t.Step) {
				return sp, nil
			}
		}
	}
	return sp, nil
}

// key encodes a canonical state; Validate keeps every field in a byte (the
// two window counts offset, as give-backs can take them below zero).
func (c Config) key(s State) string {
	b := make([]byte, 0, 4+11*len(s.Nodes))
	b = append(b, byte(s.Window), byte(s.L2), byte(s.Admitted+128), byte(s.Consumed+128))
	for _, n := range s.Nodes {
		b = c.nodeKey(b, n, s.Window)
	}
	return string(b)
}

// Config returns the configuration explored.
func (sp *Space) Config() Config { return sp.cfg }

// States is the number of distinct reachable states, up to node symmetry.
func (sp *Space) States() int { return len(sp.states) }

// Transitions is the number of transitions out of those states, Deny steps
// (which change nothing) excluded.
func (sp *Space) Transitions() int { return sp.edges }

// MaxAdmitted is the most net admissions any window reaches in any run.
func (sp *Space) MaxAdmitted() int { return sp.most }

// State returns the i-th canonical state, 0 ≤ i < States(), in BFS order.
func (sp *Space) State(i int) State { return sp.states[i].state.clone() }

// Find returns a shortest trace to a state violating invariant, and false
// when every reachable state satisfies it. invariant must not depend on the
// order of Nodes (it sees canonical states).
func (sp *Space) Find(invariant func(State) bool) (Trace, bool) {
	for i := range sp.states { // BFS order: the first found is a nearest one
		if !invariant(sp.states[i].state) {
			return sp.Trace(i), true
		}
	}
	return Trace{}, false
}

// Trace returns the shortest path from the initial state to the i-th state,
// with real node indices: at each step the canonical position the search
// recorded is mapped to the node of the concrete run that holds that
// position's state (ties go to the lower index), so that the path is one
// concrete run. Its last state equals State(i) up to the order of Nodes.
func (sp *Space) Trace(i int) Trace {
	var path []Step
	for ; sp.states[i].parent >= 0; i = sp.states[i].parent {
		path = append(path, sp.states[i].step)
	}
	slices.Reverse(path)
	tr := Trace{Initial: sp.cfg.Initial()}
	cur := tr.Initial
	order := make([]int, sp.cfg.Nodes) // real nodes ranked as the canonical state sorts them
	for _, st := range path {
		for k := range order {
			order[k] = k
		}
		slices.SortStableFunc(order, func(a, b int) int { return sp.cfg.compare(cur, cur.Nodes[a], cur.Nodes[b]) })
		want := st
		if want.Kind != Roll {
			want.Node = order[st.Node]
		}
		var t *Transition
		for _, n := range sp.cfg.Next(cur) {
			if n.Step == want {
				t = &n
				break
			}
		}
		if t == nil {
			panic("model: trace does not replay") // the symmetry argument is broken
		}
		tr.Steps = append(tr.Steps, TraceStep{t.Step, t.After})
		cur = t.After
	}
	return tr
}
