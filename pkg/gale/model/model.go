// Package model is an exhaustive, breadth-first state-space explorer for the
// leasing protocol of gale's leased mode (seed 04, "GALE"): N nodes, each with
// a local credit counter (L1), leasing batches from one shared counter per
// window (L2), interleaved in every possible order over a bounded number of
// windows.
//
// It checks the leasing machine the limiter runs as a TLA+ model checker
// would check a specification of it: it finds the largest number of
// admissions any window can see, and returns a shortest counter-example
// trace to any state that breaks a given invariant. Its tests
// check the seed's two bounds exactly — Limit + N·(Batch−1) for uncoupled
// leasing (and that this is reached), Limit for window-coupled leasing — and
// replay the explored paths on real gale.Limiters.
//
// Beyond the seed's check loop it explores every other path by which the
// limiter moves credits, as pkg/gale performs them: refunds of units a
// request took and another limit then denied (arriving at any later point,
// across window boundaries included), negative hits, returns of credits to
// L2 (idle return, eviction, reload, shutdown), and the low-water background
// refill.
//
// With Config.Reconciles it is the federated model (federated.go,
// pkg/gale/federation): the same machine one level up, with regions for
// nodes and the cross-region coordinator (L3) for L2, and a region's return
// a reconcile over a network that delivers it late, twice or never.
//
// RLQSConfig (rlqs.go) is the Rate Limit Quota Service one level out
// again: Envoys enforcing token buckets as Envoy's rate_limit_quota filter
// does, each assigned by a sidecar running the real rlqs.Machine.
//
// Each node's state for the key is the real gale.KeyState, and every change
// to it is a call of the real gale.Machine (Check, Landed, GiveBack, Drain,
// Expire): the model has no leasing logic of its own. It only sequences the
// machine's calls, as the Limiter does, against an abstract L2 — one counter
// per window with the store's semantics — and counts what each window
// admits. Time is the window index: every step of window w happens at its
// middle instant; there is no clock, no goroutine and no I/O here.
package model

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// Config is the protocol instance to explore. Nodes, Limit, Batch and
// Windows are required; the rest switch on transitions. Validate says what
// is accepted. A Config is a small value: pass it by value.
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
	// lease in flight while the window rolls whose check gave up.
	// The seed's check loop (and its Limit + N·(Batch−1) bound) has it false.
	DetachedLease bool
	// LowWater, when > 0, is the limiter's background refill
	// (gale.LeaseConfig.LowWater): a check that leaves a node at LowWater
	// credits or fewer starts a lease, which lands later as a step of its
	// own (Refill). 0..Batch−1.
	LowWater int
	// Refunds, when > 0, lets each node take units for requests that another
	// limit then denies, and refund them later (Take, then Refund, with any
	// steps between, rolls included): at most this many awaiting their
	// refund per node at once. 0..3.
	Refunds int
	// NegativeHits lets each node apply up to this many negative hits of one
	// unit per window (is_negative_hits, gale.Limiter.GiveBack). Clients may
	// send any number; the bound keeps the space finite (each hit can lower
	// a window's net admissions by one). 0..3.
	NegativeHits int
	// Returns lets a node give its credits back to L2 and forget the key:
	// an idle return, an eviction from a full L1, a reload that retires the
	// rule, or shutdown (Machine.Drain).
	Returns bool
	// GiveUps lets a check that begins a lease give up before it lands (its
	// caller went away, or its request's store deadline passed): the
	// limiter tells the machine (Machine.Abandon), and the lease lands
	// later, as a Refill step of its own.
	GiveUps bool
	// Reconciles, when > 0, federates the model (pkg/gale/federation, and
	// federated.go): the nodes are regions, each one window-coupled leased
	// machine, L2 is the cross-region coordinator (L3), and a region's
	// Return is a reconcile sent over a network instead of a give-back
	// applied at once. The network delivers it once, again (a retry whose
	// answer was lost), after its window has ended, or never. Reconciles is
	// how many a region may have in flight at once. Requires Coupled and
	// Returns. 0..2.
	Reconciles int

	// fault makes the machine explored a deliberately broken one (tests
	// only), so that tests can show the model finds each hole on its own.
	fault gale.Fault
	// coordFault does the same for the federated model's L3.
	coordFault coordinatorFault
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
	case c.LowWater < 0 || c.LowWater > 0 && c.LowWater >= c.Batch:
		return fmt.Errorf("%w: low water %d outside 0..batch−1", ErrInvalidConfig, c.LowWater)
	case c.Refunds < 0 || c.Refunds > 3:
		return fmt.Errorf("%w: refunds %d outside 0..3", ErrInvalidConfig, c.Refunds)
	case c.NegativeHits < 0 || c.NegativeHits > 3:
		return fmt.Errorf("%w: negative hits %d outside 0..3", ErrInvalidConfig, c.NegativeHits)
	case c.Reconciles < 0 || c.Reconciles > maxReconciles:
		return fmt.Errorf("%w: reconciles %d outside 0..%d", ErrInvalidConfig, c.Reconciles, maxReconciles)
	case c.Reconciles > 0 && (!c.Coupled || !c.Returns):
		return fmt.Errorf("%w: reconciles need coupled and returns (federation is window-coupled, and a reconcile is a region's return)", ErrInvalidConfig)
	}
	return nil
}

// UncoupledBound is the tight bound for uncoupled leasing: Limit +
// N·(Batch−1) net admissions per window, and Limit + N·Batch with a low-water
// refill (which tops a node up to a batch and so lets it carry a whole one).
func (c Config) UncoupledBound() int {
	if c.LowWater > 0 {
		return c.Limit + c.Nodes*c.Batch
	}
	return c.Limit + c.Nodes*(c.Batch-1)
}

// tracks reports whether the model follows which window a node's credits
// came from and what it served from them: only the give-back paths need it,
// and leaving it out otherwise keeps the seed's state counts.
func (c Config) tracks() bool { return c.Refunds > 0 || c.NegativeHits > 0 || c.Returns }

// remembers reports whether a remembered denial can change what a node does
// later: with a refill it stops one starting, and with a give-back or a
// lease landing on its own L2 can grant again within the window.
func (c Config) remembers() bool { return c.LowWater > 0 || c.GiveUps || c.tracks() }

// State is one global state of the protocol.
//
// Invariants: 0 ≤ Window < Windows; 0 ≤ L2 ≤ Limit; Consumed ≥ 0 under the
// code's semantics (TestGiveBacksNeverExceedConsumption).
type State struct {
	// Window is the index of the current window, from 0.
	Window int
	// L2 is what the shared counter can still grant in the current window.
	L2 int
	// Admitted is the current window's net admissions, fleet-wide: checks
	// admitted, less the units negative hits gave back (the quantity the
	// store counts in strict mode, and the one the bounds are about).
	Admitted int
	// Consumed is what the current window's checks took (admitted or held
	// for a refund) less what refunds and negative hits gave back, fleet-
	// wide. A give-back that restores more than was consumed makes it
	// negative. Zero when the config does not track give-backs.
	Consumed int
	// Nodes are the nodes' local (L1) states. In the explorer's canonical
	// states they are sorted (see Explore).
	Nodes []Node
}

// Node is one node's state for the key: the machine's, and what the
// requests and the driver hold besides.
type Node struct {
	// Key is the node's leasing state of the key, which only the machine
	// changes. A key the node forgot (Return) is the zero KeyState again.
	Key gale.KeyState
	// Pending is the size a low-water refill in flight asked for; 0 when
	// none is (the driver's side of Key.Lease, which names it).
	Pending int
	// Held is how many units the node took, in the current window from its
	// credits, for requests whose refund is still to come. Units taken from
	// an older window's credits are not counted: their refund gives nothing
	// back.
	Held int
	// Negs is how many negative hits the node applied in this window.
	Negs int
	// Reconciles are the reconciles the region sent that the network has
	// not finished with (Config.Reconciles), sorted (sortReconciles): empty
	// slots, Leftover 0, first. They belong to the network, not to the key:
	// a Return keeps them.
	Reconciles [maxReconciles]Reconcile
}

func (s State) clone() State {
	s.Nodes = slices.Clone(s.Nodes)
	return s
}

// Credits returns every node's credits, in node order.
func (s State) Credits() []int {
	out := make([]int, len(s.Nodes))
	for i, n := range s.Nodes {
		out[i] = int(n.Key.Credits)
	}
	return out
}

func (s State) String() string {
	str := fmt.Sprintf("window %d  L2 %d  admitted %d  credits %v", s.Window, s.L2, s.Admitted, s.Credits())
	detail := false
	flight := false
	for _, n := range s.Nodes {
		detail = detail || n.Pending != 0 || n.Held != 0 || n.Negs != 0
		flight = flight || n.Reconciles != [maxReconciles]Reconcile{}
	}
	if flight {
		str += "  in flight " + inFlight(s.Nodes)
	}
	if detail || s.Consumed != 0 {
		var b strings.Builder
		for i, n := range s.Nodes {
			if i > 0 {
				b.WriteByte(' ')
			}
			fresh := "old"
			if n.Key.WindowEnd.Equal(windowEnd(s.Window)) {
				fresh = "new"
			}
			fmt.Fprintf(&b, "{%s from %d used %d held %d refill %d}", fresh, min(n.Key.FromWindow, n.Key.Credits), n.Key.Used, n.Held, n.Pending)
		}
		str += fmt.Sprintf("  consumed %d  %s", s.Consumed, b.String())
	}
	return str
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
	// Take is a check served from local credits for a request another limit
	// denies: the unit awaits its refund (Config.Refunds).
	Take
	// LeaseTake is LeaseServe for such a request.
	LeaseTake
	// Refund gives back one unit a Take took.
	Refund
	// Negative is a negative hit of one unit (Config.NegativeHits).
	Negative
	// Refill is a lease in flight landing: a low-water refill
	// (Config.LowWater), or the lease of a check that gave up.
	Refill
	// Return gives a node's credits back to L2 and forgets the key
	// (Config.Returns; federated, Send).
	Return
	// GiveUp is a check that begins a lease and gives up before it lands
	// (Config.GiveUps).
	GiveUp
	// GiveUpLanded is a check that gives up as its lease lands, before it
	// is served from it (Config.GiveUps).
	GiveUpLanded
	// Send is a region draining its key (Return, federated): the credits
	// it gives back leave as a reconcile in flight.
	Send
	// Deliver is L3 receiving the reconcile in the region's Step.Slot and
	// answering Step.Outcome; the region hears the answer, and the
	// reconcile is done.
	Deliver
	// DeliverRetry is Deliver with the answer lost: the region sends the
	// reconcile again, under the same token, and it stays in flight.
	DeliverRetry
	// Drop is the network losing the reconcile in Step.Slot for good (the
	// region's retries gave up, or its queue was full).
	Drop
)

// Step is one transition: its kind, the node it happens on (unused by Roll),
// and the credits L2 granted (LeaseServe, LeaseTake, Lease and Refill) or
// took back (Return, Deliver, DeliverRetry) or a region sent (Send). Slot
// and Outcome are a federated step's: the reconcile's slot in the region's
// Node.Reconciles (Deliver, DeliverRetry, Drop), and L3's answer (Deliver,
// DeliverRetry).
type Step struct {
	Kind    StepKind
	Node    int
	Granted int
	Slot    int
	Outcome federation.Reconciled
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
	case Take:
		return fmt.Sprintf("node %d takes one for a denied request", s.Node)
	case LeaseTake:
		return fmt.Sprintf("node %d leases %d, takes one for a denied request", s.Node, s.Granted)
	case Refund:
		return fmt.Sprintf("node %d refunds a taken unit", s.Node)
	case Negative:
		return fmt.Sprintf("node %d applies a negative hit", s.Node)
	case Refill:
		return fmt.Sprintf("node %d's refill lands %d", s.Node, s.Granted)
	case Return:
		return fmt.Sprintf("node %d returns %d to L2", s.Node, s.Granted)
	case GiveUp:
		return fmt.Sprintf("node %d begins a lease and gives up", s.Node)
	case GiveUpLanded:
		return fmt.Sprintf("node %d leases %d and gives up", s.Node, s.Granted)
	case Send:
		if s.Granted == 0 {
			return fmt.Sprintf("region %d drains, nothing to give back", s.Node)
		}
		return fmt.Sprintf("region %d drains, reconciles %d", s.Node, s.Granted)
	case Deliver:
		return fmt.Sprintf("L3 gets region %d's reconcile: %s", s.Node, s.answer())
	case DeliverRetry:
		return fmt.Sprintf("L3 gets region %d's reconcile: %s, answer lost", s.Node, s.answer())
	case Drop:
		return fmt.Sprintf("the network loses region %d's reconcile", s.Node)
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
	return State{L2: c.Limit, Nodes: make([]Node, c.Nodes)}
}
