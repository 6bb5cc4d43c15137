package model

import (
	"fmt"
	"strings"
)

// Next returns every transition enabled in s: each node's in index order
// (in the order of the StepKind constants), then the roll. Deny steps are
// included although they change nothing, so that a replay can check denials
// too; the explorer ignores them. s is not modified.
//
// Each case quotes the sentence of seed 04 ("The lease lifecycle") or names
// the function of pkg/gale it implements. Requests have cost 1, so "credits
// ≥ cost" is credits ≥ 1.
func (c Config) Next(s State) []Transition {
	var out []Transition
	add := func(k StepKind, i, g int, t State) {
		out = append(out, Transition{Step{Kind: k, Node: i, Granted: g}, t})
	}
	for i, n := range s.Nodes {
		switch {
		// "1. Serve locally — if (credits ≥ cost) { credits -= cost; return
		// allow }. A local hit, no network."
		case n.Credits >= 1:
			t := s.clone()
			c.consume(&t, i, true)
			add(Serve, i, 0, t)
			if c.Refunds > 0 && n.Held < c.Refunds {
				t := s.clone()
				c.consume(&t, i, false)
				add(Take, i, 0, t)
			}

		// "3. Coalesce concurrent misses": a check that finds a lease in
		// flight (here a low-water refill) waits for it rather than leasing
		// itself; it is served after the Refill step.
		case n.Pending > 0 && c.mutation&twoLeases == 0:

		// "2. Lease on shortage — when credits < cost, atomically lease
		// max(leaseSize, cost) from L2; on success, add the grant to local
		// credits and retry." L2 grants what remains up to the batch (a
		// partial grant), and the retry serves the check from the grant.
		case s.L2 >= 1 && !c.DetachedLease:
			g := min(c.Batch, s.L2)
			t := s.clone()
			c.land(&t, i, g)
			c.consume(&t, i, true)
			add(LeaseServe, i, g, t)
			if c.Refunds > 0 && n.Held < c.Refunds {
				t := s.clone()
				c.land(&t, i, g)
				c.consume(&t, i, false)
				add(LeaseTake, i, g, t)
			}

		// Detached variant: the lease lands without the check that asked
		// for it being served; a Serve step spends the credits later.
		case s.L2 >= 1 && c.DetachedLease:
			g := min(c.Batch, s.L2)
			t := s.clone()
			c.land(&t, i, g)
			add(Lease, i, g, t)

		// "4. Surface global exhaustion — when L2 is globally out of budget
		// and nothing remains locally, the node returns L2's denial."
		default:
			add(Deny, i, 0, s.clone())
		}

		// Limiter.refill, landing (runLease): L2 grants what remains up to
		// what the refill asked for; nothing when L2 is exhausted.
		if n.Pending > 0 {
			t := s.clone()
			g := min(n.Pending, s.L2)
			t.Nodes[i].Pending = 0
			if g > 0 {
				c.land(&t, i, g)
			}
			add(Refill, i, g, t)
		}

		// Limiter.Refund (giveBackLeased): the unit goes back to the window
		// the decision names, at most what the node served from it.
		if n.Held > 0 {
			t := s.clone()
			t.Nodes[i].Held--
			if c.mutation&refundIntoCurrentCredits != 0 {
				c.oldGiveBack(&t, i, false)
			} else {
				c.giveBack(&t, i, false)
			}
			add(Refund, i, 0, t)
		}

		// Limiter.GiveBack (a negative hit): as a refund, for the window in
		// place; a hit that can give nothing back changes nothing and is
		// left out.
		if n.Negs < c.NegativeHits {
			t := s.clone()
			t.Nodes[i].Negs++
			if c.mutation&unboundedNegativeHits != 0 {
				if s.Consumed >= 0 { // bounds the minting, so the space stays finite
					c.oldGiveBack(&t, i, true)
					add(Negative, i, 0, t)
				}
			} else if c.giveBack(&t, i, true) {
				add(Negative, i, 0, t)
			}
		}

		// returnable (ReturnIdle, an eviction, Close): the credits of the
		// window in place go back to L2 (those of an older window are
		// dropped by the store), and the key is forgotten. An entry with a
		// lease in flight is never evicted or drained.
		if c.Returns && n.Pending == 0 && (n != Node{Held: n.Held, Negs: n.Negs}) {
			t := s.clone()
			r := 0
			if n.Fresh {
				r = min(n.Credits, n.From)
				t.L2 = min(c.Limit, t.L2+r)
			}
			t.Nodes[i] = Node{Held: n.Held, Negs: n.Negs} // Held and Negs belong to requests, not to the entry
			add(Return, i, r, t)
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
		t.Admitted, t.Consumed = 0, 0
		for i := range t.Nodes {
			n := &t.Nodes[i]
			if c.Coupled && c.mutation&carryCoupledCredits == 0 {
				n.Credits = 0 // tshard.expire
			}
			n.Fresh, n.From, n.Used, n.Negs = false, 0, 0, 0
			if c.mutation&refundIntoCurrentCredits == 0 {
				n.Held = 0 // their window has ended: their refunds give nothing back
			}
		}
		add(Roll, 0, 0, t)
	}
	return out
}

// land adds a grant of g ≥ 1 credits to node i (runLease).
func (c Config) land(t *State, i, g int) {
	n := &t.Nodes[i]
	t.L2 -= g
	if c.tracks() {
		if !n.Fresh {
			// "if !g.WindowEnd.Equal(e.windowEnd)": the credits of a new
			// window. Coupled, older credits are stranded (none are left
			// after a roll but under a mutation).
			if c.Coupled {
				n.Credits = 0
			}
			n.Fresh, n.From, n.Used = true, 0, 0
		}
		n.From += g
	}
	n.Credits += g
}

// consume serves one unit from node i's credits, admitted or taken for a
// request another limit denies (checkLeased's local hit), and starts a
// low-water refill when that leaves the node at or below the low water.
func (c Config) consume(t *State, i int, admit bool) {
	n := &t.Nodes[i]
	n.Credits--
	if c.tracks() {
		// A return gives back min(Credits, From) (returnable). Once From is
		// at least Credits it stays so (grants and give-backs raise both
		// alike), so capping it there changes no behaviour and keeps a
		// take-and-refund cycle from growing it without end.
		n.From = min(n.From, n.Credits)
		t.Consumed++
		if n.Fresh {
			n.Used++
		}
	}
	switch {
	case admit:
		t.Admitted++
	case n.Fresh || c.mutation&refundIntoCurrentCredits != 0:
		n.Held++
	}
	// Limiter.refill: "a node then never holds more than a batch of
	// credits" where credits carry over.
	if c.LowWater > 0 && n.Credits <= c.LowWater && n.Pending == 0 {
		want := c.Batch
		if !c.Coupled && c.mutation&fullBatchRefill == 0 {
			want -= n.Credits
		}
		if want >= 1 {
			n.Pending = want
		}
	}
}

// giveBack gives one unit back for node i, as giveBackLeased does: only to
// the window in place and only what the node served from it; coupled into
// its credits, otherwise to L2. negative marks a negative hit, which also
// lowers the window's net admissions. It reports whether anything changed.
func (c Config) giveBack(t *State, i int, negative bool) bool {
	n := &t.Nodes[i]
	if !n.Fresh || n.Used < 1 {
		return false
	}
	n.Used--
	t.Consumed--
	if negative {
		t.Admitted--
	}
	if c.Coupled {
		n.Credits++
		n.From++
	} else {
		t.L2 = min(c.Limit, t.L2+1)
	}
	return true
}

// oldGiveBack is the code before the fix: the unit joined whatever credits
// the node held (window-coupled, while they were live), whatever window
// had granted it and whether or not the node had served it.
func (c Config) oldGiveBack(t *State, i int, negative bool) {
	n := &t.Nodes[i]
	if c.Coupled && !n.Fresh {
		return
	}
	n.Credits++
	n.Used = max(n.Used-1, 0) // unused by the old code; kept bounded so the space stays finite
	t.Consumed--
	if negative {
		t.Admitted--
	}
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
