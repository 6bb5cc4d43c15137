package distributed

import (
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// Node is one process's side of a distributed gate: it wraps the process's
// adaptive.Gate, whose controller infers L_local, and admits while in
// flight < min(share, L_local), share being its latest grant from the
// coordinator. Run beats in the background; Beat is one heartbeat. A Node
// is safe for concurrent use.
//
// The Node must be the gate's only user, and admits with TryAcquire only:
// requests admitted through the gate directly, or from its queue, are
// counted but not capped by the share.
//
// Admission, applying a grant and taking a heartbeat's snapshot are
// serialized by the node's lock, so a report's in-flight count and applied
// generation are of one instant: no request is admitted under one share and
// reported under the next. The share and the gate's limit are checked
// together under the gate's lock (adaptive.Gate.TryAcquireBelow), so the
// gate can never refuse what the share allows, and no second count of
// requests in flight exists to drift from the gate's.
type Node struct {
	id, key     string
	gate        *adaptive.Gate
	coord       Coordinator
	fleet       Config
	heartbeat   time.Duration
	debounce    time.Duration
	selfFence   bool
	margin      time.Duration
	outage      OutagePolicy
	onFenced    func()
	onDuplicate func(error)
	clk         clock.Clock
	// eager holds a pending eager-beat signal for Run; nil without eager
	// beats. Signalling never blocks: a full channel already asks.
	eager chan struct{}
	// drainArmed is set, with mu held, while in flight is above a share
	// that a grant lowered, with eager beats on; Release reads it without
	// the lock and, when set, checks whether in flight has drained.
	drainArmed atomic.Bool
	// draining is set, with mu held, by Drain; Release reads it without the
	// lock and, when set, checks whether in flight has drained.
	draining atomic.Bool
	// next is the node that took this one over (TakeOver), nil before: from
	// then on this node forwards admissions and Stats to it and beats no
	// more. Set once, with mu held; Release reads it without the lock.
	next atomic.Pointer[Node]

	mu sync.Mutex
	// instance tells this incarnation's record from another process's:
	// chosen by NewNode, or taken over with the record (TakeOver).
	instance string
	// priors are the gates of the nodes this one took over that may still
	// have requests in flight: they count in the node's in flight, under
	// its share, until they end. None of them admits any more.
	priors []*adaptive.Gate
	// drained is Drain's channel, nil before Drain; closed, and drainedShut
	// set, once nothing is in flight or the node was taken over.
	drained     chan struct{}
	drainedShut bool
	// seq is the latest Report.Seq issued. Invariant: it only grows.
	seq uint64
	// appliedGen is the generation of the grant in force, 0 before the
	// first; share, global, live and leaseEnd are that grant's. Invariant:
	// it only grows, so a reply older than the grant in force is ignored.
	// (A coordinator that recreates the node's record numbers on above the
	// generation the node echoes: Beat.)
	appliedGen          uint64
	share, global, live int
	// leaseEnd is the grant's lease end on the node's clock: the send time
	// of its heartbeat plus the lease's remaining time at the coordinator.
	leaseEnd time.Time
	// okSeq and failSeq are the latest seqs answered and failed: an outage
	// while failSeq > okSeq, whatever order the replies came in. dupSeq is
	// the latest refused as a duplicate nodeId: refused while dupSeq >
	// okSeq.
	okSeq, failSeq, dupSeq uint64
	// fenceFired says OnFenced was called for the current episode.
	fenceFired bool
	// left says Leave succeeded: the node admits nothing and beats no more.
	left bool
	// refusedSince counts the requests the share refused while L_local had
	// room, since the last report: unmet demand, for Split Demand.
	refusedSince int
	// issuedGen is the highest generation heard of; ackedGen the highest
	// AppliedGen the coordinator recorded from the node.
	issuedGen, ackedGen uint64
	n                   nodeCounters
}

// nodeCounters are Stats' totals; guarded by Node.mu.
type nodeCounters struct {
	roundTrips, errors, duplicates, fencings, eagerBeats, refused int64
}

// NewNode returns a Node admitting through gate for c.
func NewNode(gate *adaptive.Gate, c NodeConfig) (*Node, error) {
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Fleet.LeaseTTL == 0 && c.Heartbeat > 0 {
		c.Fleet.LeaseTTL = 2 * c.Heartbeat
	}
	if err := c.validate(gate); err != nil {
		return nil, err
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	n := &Node{
		id: c.Node, instance: rand.Text(), key: c.Gate,
		gate: gate, coord: c.Coordinator, fleet: c.Fleet,
		heartbeat: c.Heartbeat, debounce: c.EagerDebounce,
		selfFence: c.SelfFence, margin: c.FenceMargin, outage: c.Outage,
		onFenced: c.OnFenced, onDuplicate: c.OnDuplicate, clk: c.Clock,
	}
	if c.EagerDebounce > 0 {
		n.eager = make(chan struct{}, 1)
	}
	return n, nil
}

// ID returns the node's identity, NodeConfig.Node.
func (n *Node) ID() string { return n.id }

// Instance returns the identity of this process's incarnation of the node,
// chosen at random by NewNode, or the predecessor's after TakeOver.
func (n *Node) Instance() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.instance
}

// Lease is one request admitted by a Node: release it exactly once when the
// request ends (further releases do nothing). It is a small value; the zero
// Lease is a no-op.
type Lease struct {
	n *Node
	l adaptive.Lease
}

// Release ends the request at now with outcome o, as adaptive.Lease.Release
// does. It takes the lock of the node that counts the request (the one
// that admitted it, or the node that took that one over) only while a
// lowered share waits for in flight to drain (eager beats on), or while the
// node drains (Drain).
func (l Lease) Release(now time.Time, o adaptive.Outcome) {
	if l.n == nil {
		return
	}
	l.l.Release(now, o)
	if n := l.n.latest(); n.drainArmed.Load() || n.draining.Load() {
		n.checkDrained()
	}
}

// TryAcquire admits a request at now if fewer than the node's ceiling are
// in flight: min(share, L_local) under a live grant, else what Mode says.
// It never waits, and a rejection allocates nothing. The check is one
// decision under the gate's lock: the gate never refuses a request the
// share admits. Requests still in flight through the gates of nodes this
// one took over count toward the ceiling. A node taken over passes the
// call on to its successor.
func (n *Node) TryAcquire(now time.Time) (Lease, bool) {
	n.mu.Lock()
	if next := n.next.Load(); next != nil {
		n.mu.Unlock()
		return next.TryAcquire(now)
	}
	m := n.modeLocked(now)
	c := n.shareOf(m)
	if len(n.priors) > 0 {
		// The priors admit no more: their count only falls meanwhile.
		c = min(c, n.gate.Limit()) - n.priorInflightLocked()
	}
	fleet := 0
	if m == ModeGranted || m == ModeHolding {
		fleet = n.global // the growth check judges by the fleet's load
	}
	gl, ok := n.gate.TryAcquireShare(now, c, fleet)
	fire := n.fenceLocked(m)
	if !ok {
		if local := n.gate.Limit(); c < local {
			n.refusedSince++
			n.n.refused++
			if m == ModeGranted && n.eager != nil && len(n.eager) == 0 && n.cappedLocked(local) {
				n.kickLocked()
			}
		}
	}
	n.mu.Unlock()
	if fire {
		n.onFenced()
	}
	if !ok {
		return Lease{}, false
	}
	return Lease{n: n, l: gl}, true
}

// modeLocked is what the node admits under at now.
func (n *Node) modeLocked(now time.Time) Mode {
	switch {
	case n.left:
		return ModeLeft
	case n.draining.Load():
		return ModeDraining
	case n.appliedGen == 0:
		return ModeWaiting
	case n.selfFence && !now.Before(n.leaseEnd.Add(-n.margin)):
		return ModeFenced
	case n.failSeq > n.okSeq || !now.Before(n.leaseEnd):
		switch {
		case n.outage.useIt:
			return ModeStatic
		case now.Before(n.leaseEnd):
			return ModeHolding
		}
		return ModeLapsed
	}
	return ModeGranted
}

// shareOf is the share the node admits under in mode m, before L_local.
func (n *Node) shareOf(m Mode) int {
	switch m {
	case ModeGranted, ModeHolding:
		return n.share
	case ModeStatic:
		return n.outage.static
	case ModeWaiting:
		if n.outage.useIt {
			return n.outage.static
		}
	}
	return 0
}

// fenceLocked starts a fencing episode if m is ModeFenced and none is
// under way; it reports whether the caller must call OnFenced once it has
// let go of the lock.
func (n *Node) fenceLocked(m Mode) bool {
	if m != ModeFenced || n.fenceFired {
		return false
	}
	n.fenceFired = true
	n.n.fencings++
	return n.onFenced != nil
}

// cappedLocked reports whether a refusal by the share is the first eager
// trigger: the share is below the node's fair part of L_global and L_local
// has room.
func (n *Node) cappedLocked(local int) bool {
	return n.live > 0 && n.share < n.global/n.live && n.inflightLocked() < local
}

// kickLocked asks Run for an eager beat, without waiting.
func (n *Node) kickLocked() {
	select {
	case n.eager <- struct{}{}:
	default: // one is pending already
	}
}

// checkDrained is the second eager trigger, in flight has drained down to
// a lowered share, and Drain's end, nothing in flight.
func (n *Node) checkDrained() {
	n.mu.Lock()
	defer n.mu.Unlock()
	in := n.inflightLocked()
	if n.drainArmed.Load() && in <= n.share {
		n.drainArmed.Store(false)
		n.kickLocked()
	}
	n.shutDrainedLocked(in)
}
