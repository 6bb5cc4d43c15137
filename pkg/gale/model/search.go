package model

import (
	"errors"
	"fmt"
)

// ErrTooLarge is returned when a space exceeds the bound it was explored
// under.
var ErrTooLarge = errors.New("model: state space larger than the bound")

// search is a breadth-first exploration of states S by steps T, for the
// models whose states are keyed whole (the region and rate models; the
// leasing model's Space also maps traces through node symmetry): every
// state reached, each once, in BFS order, with the parent and step that
// first reached it. Immutable once search returns.
type search[S, T any] struct {
	states []S
	parent []int // parent[i] < i; -1 for the initial state
	steps  []T
	edges  int
}

// searchFrom enumerates the states reachable from initial by next, identified
// by key, up to most states (ErrTooLarge past it, with what was explored),
// stopping at the first state for which stop (when not nil) is true.
func searchFrom[S, T any](initial S, key func(S) string, next func(S, func(T, S)), most int, stop func(S) bool) (*search[S, T], error) {
	sp := &search[S, T]{}
	seen := map[string]bool{}
	stopped := false
	add := func(s S, parent int, st T) {
		k := key(s)
		if stopped || seen[k] {
			return
		}
		seen[k] = true
		sp.states, sp.parent, sp.steps = append(sp.states, s), append(sp.parent, parent), append(sp.steps, st)
		stopped = stop != nil && stop(s)
	}
	var none T
	add(initial, -1, none)
	for i := 0; i < len(sp.states) && !stopped; i++ {
		next(sp.states[i], func(st T, after S) {
			if !stopped {
				sp.edges++
				add(after, i, st)
			}
		})
		if len(sp.states) > most {
			return sp, fmt.Errorf("%w: over %d states", ErrTooLarge, most)
		}
	}
	return sp, nil
}

// States is the number of distinct reachable states; Transitions the
// transitions out of them.
func (sp *search[S, T]) States() int      { return len(sp.states) }
func (sp *search[S, T]) Transitions() int { return sp.edges }

// first returns a shortest path to the first state (in BFS order) for
// which bad is true, that state, and whether there is one.
func (sp *search[S, T]) first(bad func(S) bool) ([]T, S, bool) {
	for i, s := range sp.states {
		if bad(s) {
			var path []T
			for j := i; sp.parent[j] >= 0; j = sp.parent[j] {
				path = append([]T{sp.steps[j]}, path...)
			}
			return path, s, true
		}
	}
	var none S
	return nil, none, false
}

// replay follows path from initial, taking at each step the first
// transition next offers with that step, and returns the state it ends in:
// how a test shows a trace the search found is one the model can take.
func replay[S any, T comparable](initial S, next func(S, func(T, S)), path []T) (S, error) {
	cur := initial
	for i, st := range path {
		found := false
		next(cur, func(t T, after S) {
			if !found && t == st {
				cur, found = after, true
			}
		})
		if !found {
			return cur, fmt.Errorf("step %d (%v) does not replay", i, st)
		}
	}
	return cur, nil
}
