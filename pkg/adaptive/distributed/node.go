package distributed

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// DefaultHeartbeat is NodeConfig.Heartbeat's default.
const DefaultHeartbeat = time.Second

// OutagePolicy is what a node admits when it has no live grant to admit
// under: the coordinator call failed, or the lease ran out. The zero value
// is KeepLastShare.
type OutagePolicy struct {
	static int
	useIt  bool
}

// KeepLastShare keeps admitting under the last share until its lease ends,
// and then admits nothing. Before the first grant it admits nothing.
func KeepLastShare() OutagePolicy { return OutagePolicy{} }

// StaticShare admits under a fixed share of n (still capped by L_local)
// from the moment a coordinator call fails or the lease ends, until a call
// succeeds again with a grant to apply; and before the first grant. n is
// the operator's figure for what one node may safely admit alone, e.g. the
// backend's capacity over the largest fleet size; 0 fails closed at once.
func StaticShare(n int) OutagePolicy { return OutagePolicy{static: n, useIt: true} }

func (p OutagePolicy) String() string {
	if p.useIt {
		return fmt.Sprintf("static_share(%d)", p.static)
	}
	return "keep_last_share"
}

// Mode is what a node admits under at an instant.
type Mode uint8

const (
	// ModeWaiting: no grant yet. It admits the static share under
	// StaticShare and nothing under KeepLastShare: a node that has not heard
	// from the coordinator knows of no budget it may use, and Run asks for
	// one at once.
	ModeWaiting Mode = iota
	// ModeGranted: a live grant; it admits while in flight < min(share,
	// L_local).
	ModeGranted
	// ModeHolding: the last call failed; KeepLastShare keeps the share until
	// the lease ends.
	ModeHolding
	// ModeStatic: StaticShare's share, after a failed call or the lease's
	// end (with SelfFence, only until the fence: a fenced node admits
	// nothing).
	ModeStatic
	// ModeLapsed: KeepLastShare after the lease's end, without self-fencing:
	// it admits nothing.
	ModeLapsed
	// ModeFenced: self-fenced, from FenceMargin before the lease's end until
	// a grant is applied: it admits nothing, whatever the outage policy.
	ModeFenced
	// ModeLeft: the node left the fleet (Leave): it admits nothing and
	// beats no more.
	ModeLeft
	// ModeDraining: the node's gate is going out of use (Drain): it admits
	// nothing, and beats on so that its record reserves the requests still
	// in flight, until it leaves.
	ModeDraining
)

func (m Mode) String() string {
	switch m {
	case ModeWaiting:
		return "waiting"
	case ModeGranted:
		return "granted"
	case ModeHolding:
		return "holding"
	case ModeStatic:
		return "static"
	case ModeLapsed:
		return "lapsed"
	case ModeFenced:
		return "fenced"
	case ModeLeft:
		return "left"
	case ModeDraining:
		return "draining"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// NodeConfig configures a Node. Node, Gate and Coordinator are required;
// the zero values of the other fields give a node beating every second on
// the real clock, with a lease of two beats, no eager beats, no
// self-fencing and KeepLastShare.
type NodeConfig struct {
	// Node is the node's identity, unique in its fleet (a pod name). Two
	// live processes with one Node corrupt the aggregate; the coordinator
	// refuses the second (ErrDuplicateNode).
	Node string
	// Gate names the gate at the coordinator: the nodes that share it split
	// one global ceiling.
	Gate        string
	Coordinator Coordinator
	// Fleet is what every node of the gate agrees on. Its LeaseTTL 0 means
	// 2 × Heartbeat, so one slow beat does not drop a healthy node.
	Fleet Config
	// Heartbeat is Run's interval between regular beats. 0 means
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// EagerDebounce turns on eager beats: Run makes an off-cycle beat, at
	// most one per EagerDebounce, when the node is refused by a share below
	// its fair part of L_global (⌊Global/Live⌋) while L_local has room, when
	// in flight drains down to a share a grant lowered, or when an applied
	// grant changed the share (the first grant excepted; Beat bumps the
	// generation on every beat, so a new generation alone is no news).
	// Triggers never block admission: they fill a one-slot channel that Run
	// drains. 0: regular beats only.
	EagerDebounce time.Duration
	// SelfFence turns on self-fencing: from FenceMargin before the lease's
	// end (on the node's clock) the node admits nothing until a grant is
	// applied. FenceMargin must exceed the clocks' offset plus their drift
	// over a lease (and, for work that cannot be cancelled, the longest
	// request), so the node stops before the coordinator hands its budget
	// on. Requires FenceMargin < LeaseTTL − Heartbeat.
	SelfFence   bool
	FenceMargin time.Duration
	// OnFenced, if set, is called once per fencing episode, when an
	// admission or Run first finds the node fenced, never with the node's
	// lock held; the app may abort work that cannot be cancelled. Requires
	// SelfFence.
	OnFenced func()
	// OnDuplicate, if set, is called with the error of each heartbeat the
	// coordinator refused with ErrDuplicateNode. A restarted process sees it
	// until its previous incarnation's record expires (≤ LeaseTTL); a node
	// that replaces another in the same process does not, if it takes the
	// other over (TakeOver).
	OnDuplicate func(error)
	// Outage is what the node admits without a live grant.
	Outage OutagePolicy
	// Clock times Run. nil means the real clock.
	Clock clock.Clock
}

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

func (c NodeConfig) validate(gate *adaptive.Gate) error {
	if c.Node == "" {
		return errors.New("distributed: node: Node is empty: every node needs an identity unique in its fleet (e.g. the pod name)")
	}
	pre := fmt.Sprintf("distributed: node %q: ", c.Node)
	ttl := c.Fleet.LeaseTTL
	switch {
	case gate == nil:
		return errors.New(pre + "gate is nil")
	case c.Gate == "":
		return errors.New(pre + "Gate is empty: name the gate the fleet shares")
	case c.Coordinator == nil:
		return errors.New(pre + "Coordinator is nil")
	case c.Heartbeat < 0:
		return fmt.Errorf("%sHeartbeat %v is negative (0 means %v)", pre, c.Heartbeat, DefaultHeartbeat)
	case ttl < 0:
		return fmt.Errorf("%sLeaseTTL %v is negative (0 means 2 × Heartbeat)", pre, ttl)
	case c.Heartbeat >= ttl:
		return fmt.Errorf("%sHeartbeat %v ≥ LeaseTTL %v: the lease would end before the next beat renews it; lower Heartbeat or leave LeaseTTL 0 (2 × Heartbeat)", pre, c.Heartbeat, ttl)
	case c.EagerDebounce < 0:
		return fmt.Errorf("%sEagerDebounce %v is negative (0 means no eager beats)", pre, c.EagerDebounce)
	case c.FenceMargin < 0:
		return fmt.Errorf("%sFenceMargin %v is negative", pre, c.FenceMargin)
	case !c.SelfFence && c.FenceMargin != 0:
		return fmt.Errorf("%sFenceMargin %v without SelfFence: set SelfFence or drop the margin", pre, c.FenceMargin)
	case !c.SelfFence && c.OnFenced != nil:
		return errors.New(pre + "OnFenced without SelfFence: it would never be called")
	case c.SelfFence && c.FenceMargin >= ttl:
		return fmt.Errorf("%sFenceMargin %v ≥ LeaseTTL %v: every grant would arrive fenced", pre, c.FenceMargin, ttl)
	case c.SelfFence && c.FenceMargin >= ttl-c.Heartbeat:
		return fmt.Errorf("%sFenceMargin %v ≥ LeaseTTL %v − Heartbeat %v: a healthy node would fence before its next beat renews the lease", pre, c.FenceMargin, ttl, c.Heartbeat)
	case c.Outage.useIt && c.Outage.static < 0:
		return fmt.Errorf("%sStaticShare(%d) is negative", pre, c.Outage.static)
	}
	if err := c.Fleet.Validate(); err != nil {
		return fmt.Errorf("%s%w", pre, err)
	}
	return nil
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
	gl, ok := n.gate.TryAcquireBelow(now, c)
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

// Beat makes one heartbeat at now (the node's clock). It takes the report
// (seq, applied generation, in flight, L_local, demand) as one snapshot
// under the node's lock, calls the coordinator without the lock, and
// applies the grant if its generation is above the one in force (an answer
// overtaken by a later one is ignored). The grant's lease ends, on the node's clock, at now plus the time the
// coordinator gave it, at most LeaseTTL.
//
// Beat returns the grant as received, applied or not. A failed call
// returns the coordinator's error, wrapped; the node then follows its
// outage policy. A duplicate nodeId returns an error wrapping
// ErrDuplicateNode, also passed to OnDuplicate on this goroutine, and
// leaves the node as it was. After Leave, or once another node took this
// one over, Beat returns ErrLeft and sends nothing. Beats may overlap.
//
// The report's in flight includes the requests still in flight through the
// gates of the nodes this one took over (TakeOver); those that have drained
// are forgotten.
func (n *Node) Beat(ctx context.Context, now time.Time) (Grant, error) {
	n.mu.Lock()
	if n.left || n.next.Load() != nil {
		n.mu.Unlock()
		return Grant{}, ErrLeft
	}
	n.seq++
	n.priors = slices.DeleteFunc(n.priors, func(g *adaptive.Gate) bool { return g.Inflight() == 0 })
	inflight, local := n.inflightLocked(), n.gate.Limit()
	rep := Report{Node: n.id, Instance: n.instance, Seq: n.seq, Local: local, Inflight: inflight,
		AppliedGen: n.appliedGen, Demand: min(local, inflight+n.refusedSince)}
	n.refusedSince = 0
	n.mu.Unlock()

	g, err := n.coord.Heartbeat(ctx, n.key, rep, n.fleet, now)

	n.mu.Lock()
	n.n.roundTrips++
	if err != nil {
		n.n.errors++
		dup := errors.Is(err, ErrDuplicateNode)
		if dup {
			n.n.duplicates++ // not an outage: the node keeps its state
			n.dupSeq = max(n.dupSeq, rep.Seq)
		} else {
			n.failSeq = max(n.failSeq, rep.Seq)
		}
		n.mu.Unlock()
		err = fmt.Errorf("distributed: node %q heartbeat %d: %w", n.id, rep.Seq, err)
		if dup && n.onDuplicate != nil {
			n.onDuplicate(err)
		}
		return Grant{}, err
	}
	n.okSeq = max(n.okSeq, rep.Seq)
	n.issuedGen = max(n.issuedGen, g.Gen)
	if g.Status == Granted {
		n.ackedGen = max(n.ackedGen, rep.AppliedGen)
	}
	if g.Gen > n.appliedGen {
		n.applyLocked(g, now)
	}
	n.mu.Unlock()
	return g, nil
}

// applyLocked puts g, the answer to a heartbeat sent at sent, in force.
func (n *Node) applyLocked(g Grant, sent time.Time) {
	first, old := n.appliedGen == 0, n.share
	n.appliedGen, n.share = g.Gen, max(0, g.Share)
	if g.Status == Granted { // a Stale answer carries no Global
		n.global, n.live = g.Global, g.Live
	}
	us := min(max(g.ExpiresAt-g.Now, 0), n.fleet.LeaseTTL.Microseconds())
	n.leaseEnd = sent.Add(time.Duration(us) * time.Microsecond)
	if sent.Before(n.leaseEnd.Add(-n.margin)) {
		n.fenceFired = false // unfenced: the next fence is a new episode
	}
	if n.eager == nil {
		return
	}
	if n.share != old {
		if !first {
			n.kickLocked()
		}
		// Over a changed share, in flight can only be draining to it.
		n.drainArmed.Store(n.inflightLocked() > n.share)
	}
}

// Run beats at once, then every Heartbeat, and off-cycle on eager triggers,
// until ctx ends; it returns ctx.Err() once the call in progress, if any,
// has returned. Calls to the coordinator run one at a time, in their own
// goroutine, each with a context deadline of LeaseTTL (real time: a later
// answer could only bring a lease already over); a tick during a call
// beats when it returns. So Run fires OnFenced on time even while a call
// hangs. Call it once.
func (n *Node) Run(ctx context.Context) error {
	tick := n.clk.NewTicker(n.heartbeat)
	defer tick.Stop()
	var (
		done                      = make(chan struct{}, 1)
		busy, wantTick, wantEager bool
		lastEager                 time.Time
		debounce, fence           clock.Timer
		debounceC, fenceC         <-chan time.Time
		debouncing                bool
	)
	defer func() {
		for _, t := range []clock.Timer{debounce, fence} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	start := func(offCycle bool) {
		now := n.clk.Now()
		busy, wantTick, wantEager = true, false, false
		if offCycle {
			lastEager = now
			n.mu.Lock()
			n.n.eagerBeats++
			n.mu.Unlock()
		}
		go func() {
			cctx, cancel := context.WithTimeout(ctx, n.fleet.LeaseTTL)
			defer cancel()
			n.Beat(cctx, now) // its outcome is in Stats and the callbacks
			done <- struct{}{}
		}()
	}
	start(false)
	for {
		select {
		case <-ctx.Done():
			if busy {
				<-done
			}
			return ctx.Err()
		case <-tick.C():
			wantTick = true
		case <-n.eager: // nil, never ready, without eager beats
			wantEager = true
		case <-debounceC:
			debouncing = false
		case <-fenceC:
			n.checkFence(n.clk.Now())
		case <-done:
			busy = false
			if at, ok := n.fenceAt(); ok {
				switch now := n.clk.Now(); {
				case !now.Before(at):
					n.checkFence(now)
				case fence == nil:
					fence = n.clk.NewTimer(at.Sub(now))
					fenceC = fence.C()
				default:
					fence.Reset(at.Sub(now))
				}
			}
		}
		switch {
		case busy:
		case wantTick:
			start(false)
		case wantEager && !debouncing:
			now := n.clk.Now()
			if wait := lastEager.Add(n.debounce).Sub(now); lastEager.IsZero() || wait <= 0 {
				start(true)
			} else {
				debouncing = true
				if debounce == nil {
					debounce = n.clk.NewTimer(wait)
					debounceC = debounce.C()
				} else {
					debounce.Reset(wait)
				}
			}
		}
	}
}

// fenceAt is when the grant in force fences the node, if it can.
func (n *Node) fenceAt() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaseEnd.Add(-n.margin), n.selfFence && n.appliedGen > 0
}

// checkFence starts a fencing episode if the node is fenced at now.
func (n *Node) checkFence(now time.Time) {
	n.mu.Lock()
	fire := n.fenceLocked(n.modeLocked(now))
	n.mu.Unlock()
	if fire {
		n.onFenced()
	}
}

// Stats is a Node's state at one instant, for metrics.
type Stats struct {
	Node, Instance string
	Mode           Mode
	Fenced         bool // Mode == ModeFenced
	// Duplicate says the coordinator refused the latest heartbeat it
	// answered as a duplicate nodeId (ErrDuplicateNode): another live
	// process has this Node, and this one is left out of the fleet.
	Duplicate bool
	// Local is L_local, the gate's limit; Global L_global and Live the
	// fleet size, as of the latest grant applied (0 before the first).
	Local, Global, Live int
	// Share is the latest grant's share; Ceiling what the node admits up
	// to now, min(the share its Mode gives, Local).
	Share, Ceiling int
	// Inflight counts the node's requests in flight, those of the gates
	// of nodes it took over included.
	Inflight int
	// LeaseEnd is the grant's lease end on the node's clock; zero before
	// the first grant.
	LeaseEnd time.Time
	// AppliedGen is the generation in force, IssuedGen the highest one the
	// coordinator has answered with, AckedGen the highest the coordinator
	// has recorded the node applying. GenLag is IssuedGen − AckedGen, the
	// generations the coordinator issued that it has not yet seen applied:
	// 1 in steady state (each beat acknowledges the grant before it), more
	// while replies are lost or reordered.
	AppliedGen, IssuedGen, AckedGen, GenLag uint64

	RoundTrips int64 // coordinator calls that returned, either way
	Errors     int64 // those that failed, Duplicates included
	Duplicates int64 // those refused with ErrDuplicateNode
	Fencings   int64 // fencing episodes
	EagerBeats int64 // off-cycle beats Run made
	Refused    int64 // requests refused by the share while L_local had room
}

// Stats returns the node's state at now. It changes nothing: a fence it
// finds is reported, not started. A node taken over returns its
// successor's.
func (n *Node) Stats(now time.Time) Stats {
	n.mu.Lock()
	if next := n.next.Load(); next != nil {
		n.mu.Unlock()
		return next.Stats(now)
	}
	defer n.mu.Unlock()
	m := n.modeLocked(now)
	local := n.gate.Limit()
	return Stats{
		Node: n.id, Instance: n.instance, Mode: m, Fenced: m == ModeFenced, Duplicate: n.dupSeq > n.okSeq,
		Local: local, Global: n.global, Live: n.live,
		Share: n.share, Ceiling: max(0, min(n.shareOf(m), local)), Inflight: n.inflightLocked(),
		LeaseEnd:   n.leaseEnd,
		AppliedGen: n.appliedGen, IssuedGen: n.issuedGen, AckedGen: n.ackedGen, GenLag: n.issuedGen - n.ackedGen,
		RoundTrips: n.n.roundTrips, Errors: n.n.errors, Duplicates: n.n.duplicates,
		Fencings: n.n.fencings, EagerBeats: n.n.eagerBeats, Refused: n.n.refused,
	}
}
