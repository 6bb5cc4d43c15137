package model

import (
	"errors"
	"fmt"
	"slices"
)

// Graph is a transition system to explore: an initial state, the
// transitions enabled in a state, and a key that identifies states with the
// same futures. A Graph is a small value; its functions must be pure.
type Graph[S any, T comparable] struct {
	// Initial is the state the search starts from.
	Initial S
	// Next returns the transitions enabled in s, each with a step that
	// names it among them: two transitions out of one state never share a
	// step. It must not modify s or keep references into it.
	Next func(s S) []Edge[S, T]
	// Key appends to b the encoding of s. States with equal keys must be
	// bisimilar — every step enabled in one is enabled in the other and
	// leads to states with equal keys — so that the search keeps one of them.
	Key func(b []byte, s S) []byte
	// MaxStates bounds the search; 0 means no bound. A search that reaches
	// it returns ErrTooManyStates.
	MaxStates int
}

// Edge is one transition: the step taken and the state it leads to.
type Edge[S any, T comparable] struct {
	Step  T
	After S
}

// ErrTooManyStates is returned by Explore when a search reaches the
// graph's MaxStates.
var ErrTooManyStates = errors.New("model: state bound reached")

// Space is an explored graph: for each key kept, in breadth-first order,
// the state it was first reached from and the step taken. The states
// themselves are not kept (Replay rebuilds them): the search follows the
// first concrete state reached for each key — the keys abstract, the states
// do not — so the path to any state replays on the graph as it is. It is
// immutable and safe for concurrent reads once Explore returns.
type Space[S any, T comparable] struct {
	// parent[i] is the state state i was first reached from; −1 for the
	// initial state. Invariant: parent[i] < i, and depth[i] =
	// depth[parent[i]] + 1, so following parents is a shortest path.
	parent []int32
	step   []T
	depth  []int32
	edges  int
}

// Explore enumerates the states reachable from g.Initial breadth first,
// keeping the first state reached for each key. visit is called once for
// each kept state, in order, with its index; returning false stops the
// search there (the state is kept, and its successors are not explored).
// maxDepth > 0 bounds the search to paths of at most that many steps.
func Explore[S any, T comparable](g Graph[S, T], maxDepth int, visit func(i int, s S) bool) (*Space[S, T], error) {
	sp := &Space[S, T]{}
	seen := map[string]int32{}
	var buf []byte
	stopped := false
	add := func(s S, parent int32, step T, depth int32) (int32, bool) {
		buf = g.Key(buf[:0], s)
		if _, ok := seen[string(buf)]; ok {
			return 0, false
		}
		i := int32(len(sp.parent))
		seen[string(buf)] = i
		sp.parent = append(sp.parent, parent)
		sp.step = append(sp.step, step)
		sp.depth = append(sp.depth, depth)
		if visit != nil && !visit(int(i), s) {
			stopped = true
		}
		return i, true
	}
	type queued struct {
		index int32
		state S
	}
	var none T
	i, _ := add(g.Initial, -1, none, 0)
	level := []queued{{i, g.Initial}}
	for depth := int32(1); len(level) > 0 && !stopped; depth++ {
		if maxDepth > 0 && int(depth) > maxDepth {
			break
		}
		var next []queued
		for _, q := range level {
			for _, e := range g.Next(q.state) {
				sp.edges++
				if j, ok := add(e.After, q.index, e.Step, depth); ok {
					next = append(next, queued{j, e.After})
				}
				if stopped {
					return sp, nil
				}
				if g.MaxStates > 0 && len(sp.parent) >= g.MaxStates {
					return sp, fmt.Errorf("%w: %d states", ErrTooManyStates, len(sp.parent))
				}
			}
		}
		level = next
	}
	return sp, nil
}

// States is the number of distinct states explored (keys kept).
func (sp *Space[S, T]) States() int { return len(sp.parent) }

// Transitions is the number of transitions followed out of the explored
// states, those to states already seen included.
func (sp *Space[S, T]) Transitions() int { return sp.edges }

// Depth is the length of a shortest path to state i.
func (sp *Space[S, T]) Depth(i int) int { return int(sp.depth[i]) }

// Path returns the steps of a shortest path from the initial state to
// state i.
func (sp *Space[S, T]) Path(i int) []T {
	var path []T
	for ; sp.parent[i] >= 0; i = int(sp.parent[i]) {
		path = append(path, sp.step[i])
	}
	slices.Reverse(path)
	return path
}

// Replay runs steps from g.Initial and returns the states after each; it
// fails when a step is not enabled where it is taken.
func Replay[S any, T comparable](g Graph[S, T], steps []T) ([]S, error) {
	cur := g.Initial
	out := make([]S, 0, len(steps))
	for k, st := range steps {
		found := false
		for _, e := range g.Next(cur) {
			if e.Step == st {
				cur, found = e.After, true
				break
			}
		}
		if !found {
			return out, fmt.Errorf("model: step %d (%v) is not enabled", k, st)
		}
		out = append(out, cur)
	}
	return out, nil
}
