// Package model is an exhaustive, breadth-first state-space explorer for the
// leasing protocol of gale's leased mode (seed 04, "GALE"): N nodes, each with
// a local credit counter (L1), leasing batches from one shared counter per
// window (L2), interleaved in every possible order over a bounded number of
// windows.
//
// It is the Java-free twin of the seed's TLA+ specifications: it finds the
// largest number of admissions any window can see, and returns a shortest
// counter-example trace to any state that breaks a given invariant. Its tests
// check the seed's two bounds exactly — Limit + N·(Batch−1) for uncoupled
// leasing (and that this is reached), Limit for window-coupled leasing — and
// replay the explored paths on real gale.Limiters.
//
// The model is written to be read beside the seed's prose: each transition in
// Next carries the sentence it implements. Time is not modelled beyond the
// window index; there is no clock, no goroutine and no I/O here.
package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Config is the protocol instance to explore. All fields are required except
// the two flags; Validate says what is accepted. A Config is a small value:
// pass it by value.
type Config struct {
	// Nodes is N, the number of nodes sharing the limit. 1..16.
	Nodes int
	// Limit is L, the units L2 grants per window. 1..100.
	Limit int
	// Batch is how many credits a lease asks for. 1..Limit.
	Batch int
	// Windows bounds the exploration to windows 0..Windows−1. 1..16.
	Windows int
	// Coupled expires a node's credits when the window that granted them
	// rolls (the seed's window-coupling); false lets them carry over.
	Coupled bool
	// DetachedLease lets a lease land as a step of its own, with the credit
	// it was taken for served later, at any point of the interleaving. It
	// models a lease that is not consumed by the check that asked for it — a
	// LowWater background refill, or a lease in flight while the window rolls.
	// The seed's check loop (and its Limit + N·(Batch−1) bound) has it false.
	DetachedLease bool
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("model: invalid config")

// Validate reports whether c can be explored. The bounds keep every counter
// of a state in one byte.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > 16:
		return fmt.Errorf("%w: nodes %d outside 1..16", ErrInvalidConfig, c.Nodes)
	case c.Limit < 1 || c.Limit > 100:
		return fmt.Errorf("%w: limit %d outside 1..100", ErrInvalidConfig, c.Limit)
	case c.Batch < 1 || c.Batch > c.Limit:
		return fmt.Errorf("%w: batch %d outside 1..limit %d", ErrInvalidConfig, c.Batch, c.Limit)
	case c.Windows < 1 || c.Windows > 16:
		return fmt.Errorf("%w: windows %d outside 1..16", ErrInvalidConfig, c.Windows)
	}
	return nil
}

// UncoupledBound is the seed's tight bound for uncoupled leasing:
// Limit + N·(Batch−1) admissions per window.
func (c Config) UncoupledBound() int { return c.Limit + c.Nodes*(c.Batch-1) }

// State is one global state of the protocol.
//
// Invariants: 0 ≤ Window < Windows; 0 ≤ L2 ≤ Limit; 0 ≤ Credits[i] ≤ Batch.
type State struct {
	// Window is the index of the current window, from 0.
	Window int
	// L2 is what the shared counter can still grant in the current window.
	L2 int
	// Admitted counts the admissions of the current window, fleet-wide.
	Admitted int
	// Credits are the nodes' local (L1) credits. In the explorer's canonical
	// states they are sorted ascending (see Explore).
	Credits []int
}

func (s State) clone() State {
	s.Credits = slices.Clone(s.Credits)
	return s
}

func (s State) String() string {
	return fmt.Sprintf("window %d  L2 %d  admitted %d  credits %v", s.Window, s.L2, s.Admitted, s.Credits)
}

// StepKind names a transition.
type StepKind uint8

const (
	// Serve is a check a node answers from its local credits.
	Serve StepKind = iota + 1
	// LeaseServe is a check on a node without credits: it leases a batch (or
	// what remains) from L2 and admits itself from the grant.
	LeaseServe
	// Deny is a check on a node without credits while L2 is exhausted: the
	// node surfaces L2's denial. The state does not change.
	Deny
	// Lease is a detached lease (Config.DetachedLease): credits land, nothing
	// is admitted.
	Lease
	// Roll ends the current window and starts the next.
	Roll
)

// Step is one transition: its kind, the node it happens on (unused by Roll),
// and the credits L2 granted (LeaseServe and Lease).
type Step struct {
	Kind    StepKind
	Node    int
	Granted int
}

func (s Step) String() string {
	switch s.Kind {
	case Serve:
		return fmt.Sprintf("node %d serves from its credits", s.Node)
	case LeaseServe:
		return fmt.Sprintf("node %d leases %d and admits one", s.Node, s.Granted)
	case Deny:
		return fmt.Sprintf("node %d is denied (L2 exhausted)", s.Node)
	case Lease:
		return fmt.Sprintf("node %d leases %d (detached)", s.Node, s.Granted)
	case Roll:
		return "the window rolls"
	}
	return fmt.Sprintf("Step(%d)", s.Kind)
}

// Transition is a step and the state it leads to.
type Transition struct {
	Step  Step
	After State
}

// Initial is the state before anything happens: window 0, a full L2, no
// credits anywhere.
func (c Config) Initial() State {
	return State{L2: c.Limit, Credits: make([]int, c.Nodes)}
}

// Next returns every transition enabled in s, nodes in index order, then the
// roll. Deny steps are included although they change nothing, so that a
// replay can check denials too; the explorer ignores them. s is not modified.
//
// Each case quotes the sentence of seed 04 ("The lease lifecycle") it
// implements. Requests have cost 1, so "credits ≥ cost" is credits ≥ 1.
func (c Config) Next(s State) []Transition {
	var out []Transition
	for i, cr := range s.Credits {
		switch {
		// "1. Serve locally — if (credits ≥ cost) { credits -= cost; return
		// allow }. A local hit, no network."
		case cr >= 1:
			t := s.clone()
			t.Credits[i]--
			t.Admitted++
			out = append(out, Transition{Step{Kind: Serve, Node: i}, t})

		// "2. Lease on shortage — when credits < cost, atomically lease
		// max(leaseSize, cost) from L2; on success, add the grant to local
		// credits and retry." L2 grants what remains up to the batch (a
		// partial grant), and the retry serves the check from the grant.
		// "3. Coalesce concurrent misses" is why a node has at most one
		// lease at a time: the check is one step.
		case s.L2 >= 1 && !c.DetachedLease:
			g := min(c.Batch, s.L2)
			t := s.clone()
			t.L2 -= g
			t.Credits[i] += g - 1
			t.Admitted++
			out = append(out, Transition{Step{Kind: LeaseServe, Node: i, Granted: g}, t})

		// Detached variant: the lease lands without the check that asked
		// for it being served; a Serve step spends the credits later.
		case s.L2 >= 1 && c.DetachedLease:
			g := min(c.Batch, s.L2)
			t := s.clone()
			t.L2 -= g
			t.Credits[i] += g
			out = append(out, Transition{Step{Kind: Lease, Node: i, Granted: g}, t})

		// "4. Surface global exhaustion — when L2 is globally out of budget
		// and nothing remains locally, the node returns L2's denial."
		default:
			out = append(out, Transition{Step{Kind: Deny, Node: i}, s.clone()})
		}
	}
	// "L2 resets to Limit each window, but each node may still hold up to
	// Batch − 1 unconsumed local credits from the prior window's last lease"
	// (uncoupled). "When the L2 window that granted a key's credits rolls
	// (now ≥ lastDecision.resetAt), the local credits expire instead of
	// carrying over" (coupled). The exploration stops at the last window.
	if s.Window+1 < c.Windows {
		t := s.clone()
		t.Window++
		t.L2 = c.Limit
		t.Admitted = 0
		if c.Coupled {
			clear(t.Credits)
		}
		out = append(out, Transition{Step{Kind: Roll}, t})
	}
	return out
}

// TraceStep is one step of a Trace and the (concrete, unsorted) state after it.
type TraceStep struct {
	Step  Step
	After State
}

// Trace is a path of transitions from Initial, with real node indices: a
// replay of it on N nodes is a valid run of the protocol.
type Trace struct {
	Initial State
	Steps   []TraceStep
}

// Last is the state the trace ends in.
func (t Trace) Last() State {
	if len(t.Steps) == 0 {
		return t.Initial
	}
	return t.Steps[len(t.Steps)-1].After
}

// String renders the trace one step a line, each with the state after it.
func (t Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-36s %v\n", "initial", t.Initial)
	for _, s := range t.Steps {
		fmt.Fprintf(&b, "%-36s %v\n", s.Step, s.After)
	}
	return b.String()
}
