package model

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// The federated model (Config.Reconciles > 0) is the window-coupled model
// relabelled, as pkg/gale/federation lifts GALE one level: nodes are
// regions, each one leased machine (one process per region: the regional
// escrow is not modelled), L2 is the cross-region coordinator L3 — one count
// per window, forgotten at the boundary — and a region's credits are its
// escrow. What is new is the network between a region and L3. A region that
// drains its key (idle return, shutdown, crash recovery: Machine.Drain, the
// model's Return) gives the leftover back with a reconcile
// (federation.Coordinator.Reconcile) under a fresh token, and the reconcile
// is in flight until the network is done with it: L3 gets it and the region
// hears the answer (Deliver), L3 gets it and the answer is lost, so the
// region sends it again under the same token (DeliverRetry), or it is lost
// for good (Drop). Each can happen at any later point, after the window
// boundary included.
//
// L3 answers a reconcile as federation.MemoryCoordinator does: duplicate
// when it holds the marker of the reconcile's (key, window, token) — an
// earlier copy was applied — expired when the reconcile's window has ended
// (its units died with it), and otherwise applied: the leftover goes back to
// the window in place (never above Limit), and the marker is kept until the
// window ends.
//
// The symmetry reduction stays sound with reconciles in flight. A reconcile
// belongs to the region that sent it and is kept in that region's Node. L3
// names it by (window, region, sequence number) and reads the name only to
// compare it with the name of another copy of the same reconcile, never with
// another reconcile's: so neither the region's index nor the sequence
// number is in the state. A reconcile is its leftover, whether its window
// has ended, and whether L3 holds its marker (Reconcile.Applied: L3's state,
// kept on the reconcile because only its own copies read it, and forgotten
// with the reconcile, which leaves no copy to read it). Renaming regions,
// each with its reconciles, renames every transition and changes no answer
// of L3; and since the network delivers in any order and L3 reads no order,
// a region's reconciles are a multiset, kept sorted (sortReconciles), so
// that a region's encoding — and the canonical sort of regions by it — does
// not depend on the order they were sent in.

// maxReconciles bounds Config.Reconciles: the slots of Node.Reconciles.
const maxReconciles = 2

// Reconcile is a give-back a region sent to L3 that the network is not done
// with (federation.Reconcile). The zero Reconcile is an empty slot.
type Reconcile struct {
	// Leftover is how many units it gives back; ≥ 1 in a used slot.
	Leftover int
	// Ended is set when the window that granted the units — the one it
	// names — has ended: L3 answers it Expired.
	Ended bool
	// Applied is L3's marker of it: a copy was applied, and the one in
	// flight is the retry. Markers lapse with their window: false once
	// Ended.
	Applied bool
}

// coordinatorFault names a deliberate defect of the federated model's L3
// (tests only): the model must find each.
type coordinatorFault uint8

const (
	// faultNoMarker ignores the reconcile marker: a retried reconcile is
	// applied again (a non-idempotent coordinator).
	faultNoMarker coordinatorFault = 1 << iota
	// faultWrongWindow applies a reconcile to the window in place whatever
	// window it names: one whose window has ended credits the next.
	faultWrongWindow
)

// federated reports whether c is the federated model.
func (c Config) federated() bool { return c.Reconciles > 0 }

// send is a region's Return, federated: node i drains its key (Machine.Drain)
// and what it gives back leaves as a reconcile in flight. A drain with
// nothing to give back sends nothing. A drain with all of the region's
// Config.Reconciles slots taken is not a step: federation.Region then drops
// its oldest pending reconcile, which is a Drop followed by this Send.
func (c Config) send(s State, i int) (Transition, bool) {
	t := s.clone()
	n := &t.Nodes[i]
	r, _ := c.machine().Drain(&n.Key, instant(s.Window))
	if r.Credits > 0 {
		if used(n) == c.Reconciles {
			return Transition{}, false
		}
		// Slot 0 is empty: one is, and empty slots sort first.
		n.Reconciles[0] = Reconcile{Leftover: int(r.Credits), Ended: !r.WindowEnd.Equal(windowEnd(s.Window))}
		c.sortReconciles(n)
	}
	*n = Node{Held: n.Held, Negs: n.Negs, Reconciles: n.Reconciles} // the key is forgotten; requests and the network keep theirs
	return Transition{Step{Kind: Send, Node: i, Granted: int(r.Credits)}, t}, true
}

// used is how many of n's slots hold a reconcile.
func used(n *Node) int {
	k := 0
	for _, r := range n.Reconciles {
		if r.Leftover > 0 {
			k++
		}
	}
	return k
}

// deliver is L3 getting reconcile r: it answers as
// federation.MemoryCoordinator does (see the top of this file), and returns
// the answer and the units it took back into the window in place.
func (c Config) deliver(t *State, r Reconcile) (federation.Reconciled, int) {
	switch {
	case r.Applied && c.coordFault&faultNoMarker == 0:
		return federation.Duplicate, 0
	case r.Ended && c.coordFault&faultWrongWindow == 0:
		return federation.Expired, 0
	}
	// Not ended (or the wrong-window fault): the window r names is, for L3,
	// the one in place.
	before := t.L2
	c.giveBack(t, gale.Return{Credits: int64(r.Leftover), WindowEnd: windowEnd(t.Window)})
	return federation.Applied, t.L2 - before
}

// reconciles returns the network's transitions of node i's reconciles in s:
// for each distinct reconcile in flight, Deliver, DeliverRetry and Drop. A
// DeliverRetry that changes nothing (a duplicate, an expired reconcile) is a
// self-loop and left out, as Deny is.
func (c Config) reconciles(s State, i int) []Transition {
	var out []Transition
	rs := s.Nodes[i].Reconciles
	for j, r := range rs {
		if r.Leftover == 0 || j > 0 && c.reconcileCode(rs[j-1]) == c.reconcileCode(r) {
			continue // an empty slot, or one alike to the slot before
		}
		for _, kind := range []StepKind{Deliver, DeliverRetry, Drop} {
			t := s.clone()
			n := &t.Nodes[i]
			step := Step{Kind: kind, Node: i, Slot: j}
			if kind != Drop {
				step.Outcome, step.Granted = c.deliver(&t, r)
			}
			if kind == DeliverRetry {
				if step.Outcome != federation.Applied || r.Applied && step.Granted == 0 {
					continue
				}
				n.Reconciles[j].Applied = true
			} else {
				n.Reconciles[j] = Reconcile{}
			}
			c.sortReconciles(n)
			out = append(out, Transition{step, t})
		}
	}
	return out
}

// rollReconciles is the roll, for n's reconciles in flight: their window
// has ended, and L3's markers of it lapse.
func (c Config) rollReconciles(n *Node) {
	for j := range n.Reconciles {
		if n.Reconciles[j].Leftover > 0 {
			n.Reconciles[j] = Reconcile{Leftover: n.Reconciles[j].Leftover, Ended: true}
		}
	}
	c.sortReconciles(n)
}

// reconcileCode is r's encoding: whether it is ended and marked, and its
// leftover — but an ended reconcile's only under faultWrongWindow: any
// other L3 answers it Expired whatever it gives back, so that it can only
// be dropped or delivered for nothing, and ended reconciles that differ only
// in their leftover lead to the same states. An empty slot encodes as 0, 0.
func (c Config) reconcileCode(r Reconcile) [2]byte {
	left := byte(r.Leftover)
	if r.Ended && c.coordFault&faultWrongWindow == 0 {
		left = 1
	}
	return [2]byte{b2(r.Ended) | b2(r.Applied)<<1, left}
}

// sortReconciles sorts n's reconciles into the canonical order, that of
// their encodings (empty slots first), so that regions whose reconciles in
// flight are alike as multisets encode equally.
func (c Config) sortReconciles(n *Node) {
	slices.SortFunc(n.Reconciles[:], func(a, b Reconcile) int {
		ka, kb := c.reconcileCode(a), c.reconcileCode(b)
		return cmp.Compare(string(ka[:]), string(kb[:]))
	})
}

// reconcileKey appends the encoding of n's reconciles, in the slots'
// (sorted) order.
func (c Config) reconcileKey(b []byte, n Node) []byte {
	for _, r := range n.Reconciles {
		k := c.reconcileCode(r)
		b = append(b, k[:]...)
	}
	return b
}

// answer words L3's answer in a Deliver or DeliverRetry step.
func (s Step) answer() string {
	if s.Outcome == federation.Applied {
		return fmt.Sprintf("applied, takes back %d", s.Granted)
	}
	return s.Outcome.String()
}

// inFlight renders the reconciles in flight, by node: each its leftover,
// "ended" when its window has, "marked" when L3 holds its marker.
func inFlight(nodes []Node) string {
	var b strings.Builder
	for i, n := range nodes {
		if used(&n) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:{", i)
		first := true
		for _, r := range n.Reconciles {
			if r.Leftover == 0 {
				continue
			}
			if !first {
				b.WriteByte(' ')
			}
			first = false
			fmt.Fprintf(&b, "%d", r.Leftover)
			if r.Ended {
				b.WriteString(" ended")
			}
			if r.Applied {
				b.WriteString(" marked")
			}
		}
		b.WriteByte('}')
	}
	return b.String()
}
