package adaptive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// GateConfig configures a Gate. Controller is required; the zero values of
// the other fields give an unnamed gate with no queue on the real clock.
type GateConfig struct {
	// Name labels the gate in its Snapshot (e.g. the route).
	Name string
	// Controller sets the limit. The gate owns it from now on: nothing else
	// may call it.
	Controller Controller
	// MaxQueue is how many requests may wait for a slot. 0: no queue, a
	// request at the limit is rejected at once.
	MaxQueue int
	// QueueTimeout is how long a queued request may wait before Acquire
	// gives up with ErrQueueTimeout. 0 means no limit other than the
	// request's context. Ignored when MaxQueue is 0.
	QueueTimeout time.Duration
	// LIFO serves the newest waiter first, which keeps latency low for the
	// requests that are served when the queue is long. The default is FIFO.
	LIFO bool
	// Clock makes the queue timers. nil means the real clock.
	Clock clock.Clock
	// OnLimitChange, if set, observes every change of the limit: it is called
	// after the change, on the goroutine whose Release caused it, never with
	// the gate's lock held, so it may call Snapshot. Changes caused by
	// concurrent Releases may be reported out of order; read Snapshot for the
	// current limit.
	OnLimitChange func(old, new int)
	// StatsWindow is how many recent samples Snapshot's latency and error
	// figures cover. 0 means 1024.
	StatsWindow int
}

// DefaultStatsWindow is GateConfig.StatsWindow's default.
const DefaultStatsWindow = 1024

// Gate caps the requests in flight at the limit its Controller infers, and
// optionally queues the requests above it. It is safe for concurrent use.
//
// The cap is enforced at admission: a request is admitted only while fewer
// than the limit are in flight. Releasing a request can lower the limit
// below the number still in flight; they are not revoked, and nothing is
// admitted until inflight has fallen below the new limit. A rise of the limit
// admits waiting requests at once.
type Gate struct {
	name          string
	ctrl          Controller
	maxQueue      int
	queueTimeout  time.Duration
	lifo          bool
	clock         clock.Clock
	onLimitChange func(old, new int)

	mu sync.Mutex
	// limit is the controller's last answer. Invariant: the controller's
	// MinLimit ≤ limit ≤ its MaxLimit, and limit ≥ 1.
	limit int
	// limitNow mirrors limit for Limit, which reads it without the lock; it
	// is written only with mu held. Invariant: limitNow == limit whenever mu
	// is not held.
	limitNow atomic.Int64
	// inflight counts admitted, unreleased requests. Invariant: 0 ≤ inflight;
	// inflight only grows by admission, and admission requires inflight <
	// limit, so inflight ≤ limit except after a decrease, while it drains.
	inflight int
	// queue holds the waiting requests. Invariant: queue.len ≤ maxQueue, and
	// queue.len > 0 ⇒ inflight ≥ limit (a free slot never idles while a
	// request waits).
	queue waitList
	free  *slot // recycled slots
	// rebaser is the controller's Rebaser, or nil (Rebase, Level).
	rebaser Rebaser
	// overdue is the controller's OverdueReporter, or nil. pending holds
	// the slots in flight not yet reported overdue, late those reported
	// overdue and not yet lost, each oldest first; newestDone is the
	// admission time of the newest request that has completed OK, and
	// newestRTT its RTT.
	overdue    OverdueReporter
	after      time.Duration // overdue's threshold, read after every Observe
	pending    slotList
	late       slotList
	newestDone time.Time
	newestRTT  time.Duration
	stats      statsRing
	n          counters
}

// counters are the Snapshot totals; guarded by Gate.mu.
type counters struct {
	allowed, rejected, rejectedQueueFull, timedOutInQueue, cancelled, adjustedUp, adjustedDown int64
}

// NewGate returns a Gate for c.
func NewGate(c GateConfig) (*Gate, error) {
	switch {
	case c.Controller == nil:
		return nil, errors.New("adaptive: gate: Controller is nil: pass one from NewGradient2, NewAIMD, NewP95 or NewVegas")
	case c.MaxQueue < 0:
		return nil, fmt.Errorf("adaptive: gate: MaxQueue %d is negative (0 means no queue)", c.MaxQueue)
	case c.QueueTimeout < 0:
		return nil, fmt.Errorf("adaptive: gate: QueueTimeout %v is negative (0 means no timeout)", c.QueueTimeout)
	case c.StatsWindow < 0:
		return nil, fmt.Errorf("adaptive: gate: StatsWindow %d is negative", c.StatsWindow)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.StatsWindow == 0 {
		c.StatsWindow = DefaultStatsWindow
	}
	g := &Gate{
		name:          c.Name,
		ctrl:          c.Controller,
		maxQueue:      c.MaxQueue,
		queueTimeout:  c.QueueTimeout,
		lifo:          c.LIFO,
		clock:         c.Clock,
		onLimitChange: c.OnLimitChange,
		limit:         max(1, c.Controller.Limit()),
		stats:         newStatsRing(c.StatsWindow),
	}
	g.overdue, _ = c.Controller.(OverdueReporter)
	g.rebaser, _ = c.Controller.(Rebaser)
	if g.overdue != nil {
		g.after = g.overdue.OverdueAfter()
	}
	g.limitNow.Store(int64(g.limit))
	return g, nil
}

// Name returns the gate's name.
func (g *Gate) Name() string { return g.name }

// Limit returns the limit in force. It takes no lock and allocates nothing,
// so a rejection can report the limit at no cost when the gate is busiest
// (Snapshot copies and sorts the statistics window). A concurrent Release
// may change the limit just after Limit reads it.
func (g *Gate) Limit() int { return int(g.limitNow.Load()) }

// TryAcquire admits a request at now if fewer than the limit are in flight.
// It never waits, never queues, and a rejection allocates nothing.
func (g *Gate) TryAcquire(now time.Time) (Lease, bool) {
	g.mu.Lock()
	old := g.reportOverdueLocked(now)
	if g.inflight >= g.limit {
		g.n.rejected++
		g.unlock(old)
		return Lease{}, false
	}
	l := g.admitLocked(now)
	g.unlock(old)
	return l, true
}

// TryAcquireBelow is TryAcquire under an extra ceiling: it admits a request
// at now if fewer than min(ceiling, the limit) are in flight. Both bounds
// are compared with the in-flight count in one critical section, so no
// concurrent Release can move the limit or the count between the check and
// the admission: whoever passes the ceiling in (a distributed share) has
// its admission decided by the gate's own count. A ceiling ≤ 0 admits
// nothing. A rejection counts in Snapshot's Rejected and allocates nothing.
//
// Under a ceiling below the limit, the admission's Sample.Inflight is its
// in-flight count as a fraction of the ceiling, scaled to the limit
// (rounded up): a distributed node whose share is a quarter of the fleet's
// ceiling is fully used at a quarter of its own limit, because the backend
// then carries the whole fleet's load. The controller's utilization guard
// sees that; judged against the limit, a node at its share would look idle
// and the limit could never grow. Its Sample.Ceiling is the ceiling, how
// many answers a round trip brings the node (start-up paces by it).
func (g *Gate) TryAcquireBelow(now time.Time, ceiling int) (Lease, bool) {
	return g.TryAcquireShare(now, ceiling, 0)
}

// TryAcquireShare is TryAcquireBelow for a distributed node whose ceiling
// is its share of the fleet's ceiling fleet (L_global; ≤ 0: unknown, as
// TryAcquireBelow). Under a share below the limit, the admission's
// Sample.Load is its in-flight count as a fraction of the share, applied to
// fleet (rounded up): the backend's load the node can infer (see
// Sample.Load), beside Sample.Inflight scaled to the limit.
func (g *Gate) TryAcquireShare(now time.Time, ceiling, fleet int) (Lease, bool) {
	g.mu.Lock()
	old := g.reportOverdueLocked(now)
	defer g.unlock(old)
	if g.inflight >= min(g.limit, ceiling) {
		g.n.rejected++
		return Lease{}, false
	}
	l := g.admitLocked(now)
	if ceiling < g.limit {
		// inflight ≤ ceiling < limit: the product fits and the result ≤ limit.
		in := l.s.inflight
		l.s.inflight = (in*g.limit + ceiling - 1) / ceiling
		l.s.ceiling = ceiling
		if fleet > 0 {
			// inflight ≤ ceiling and both counts are far below 2^31 (a
			// share and L_global are at most distributed.MaxCount): the
			// product fits and the result ≤ fleet.
			l.s.load = (in*fleet + ceiling - 1) / ceiling
		}
	}
	return l, true
}

// Rebase moves the limit to limit at now through the controller, if it is
// a Rebaser (see Rebaser), and returns the limit then in force and whether
// the controller could be moved. Requests in flight are not revoked, as
// after any decrease; a raise admits waiting requests at once.
func (g *Gate) Rebase(now time.Time, limit int) (int, bool) {
	if g.rebaser == nil {
		return g.Limit(), false
	}
	g.mu.Lock()
	old := g.limit
	g.setLimitLocked(g.rebaser.Rebase(limit))
	if g.overdue != nil {
		g.after = g.overdue.OverdueAfter()
	}
	g.admitWaitersLocked(now)
	in := g.limit
	g.unlock(old)
	return in, true
}

// Level is the controller's estimate of the limit: Rebaser's Level, or the
// limit for a controller that is not a Rebaser.
func (g *Gate) Level() int {
	if g.rebaser == nil {
		return g.Limit()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rebaser.Level()
}

// Inflight returns the number of admitted, unreleased requests, exact at one
// instant (it takes the gate's lock, and copies nothing, unlike Snapshot).
func (g *Gate) Inflight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// Acquire admits a request at now, waiting in the queue if the gate is at its
// limit. It returns ErrLimit if there is no queue, ErrQueueFull if the queue
// is full, ErrQueueTimeout after QueueTimeout in the queue, or ctx.Err() as
// soon as ctx ends (leaving the queue at once; an already ended ctx admits
// nothing). On error the Lease is the zero Lease and the gate is as it was.
func (g *Gate) Acquire(ctx context.Context, now time.Time) (Lease, error) {
	if err := ctx.Err(); err != nil {
		g.mu.Lock()
		g.n.cancelled++
		g.mu.Unlock()
		return Lease{}, err
	}
	w, l, err := g.enqueue(now)
	if w == nil {
		return l, err
	}
	var expiry <-chan time.Time
	if g.queueTimeout > 0 {
		t := g.clock.NewTimer(g.queueTimeout)
		defer t.Stop()
		expiry = t.C()
	}
	select {
	case <-w.ready:
		return w.result()
	case <-expiry:
		return g.abandon(w, waitTimedOut, nil)
	case <-ctx.Done():
		return g.abandon(w, waitCancelled, ctx.Err())
	}
}

// enqueue admits at once (w == nil, err == nil), refuses (w == nil, err set)
// or queues a waiter (w != nil) whose ready channel closes when it leaves
// the queue.
func (g *Gate) enqueue(now time.Time) (w *waiter, l Lease, err error) {
	g.mu.Lock()
	old := g.reportOverdueLocked(now)
	defer g.unlock(old)
	if g.inflight < g.limit {
		return nil, g.admitLocked(now), nil
	}
	if g.maxQueue == 0 {
		g.n.rejected++
		return nil, Lease{}, ErrLimit
	}
	g.expireOldestLocked(now)
	if g.queue.len >= g.maxQueue {
		g.n.rejected++
		g.n.rejectedQueueFull++
		return nil, Lease{}, ErrQueueFull
	}
	w = &waiter{ready: make(chan struct{})}
	if g.queueTimeout > 0 {
		w.deadline = now.Add(g.queueTimeout)
	}
	g.queue.pushBack(w)
	return w, Lease{}, nil
}

// result is what Acquire answers for a waiter that has left the queue.
func (w *waiter) result() (Lease, error) {
	if w.state == waitAdmitted {
		return w.lease, nil
	}
	return Lease{}, ErrQueueTimeout // waitCancelled is answered by abandon
}

// abandon ends w's wait because its timer fired (why == waitTimedOut) or its
// context ended (why == waitCancelled, with ctxErr). If w was admitted in
// the meantime, a timed-out wait keeps its lease (it was admitted before its
// deadline) and a cancelled one gives the slot back unused.
func (g *Gate) abandon(w *waiter, why waitState, ctxErr error) (Lease, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case w.state == waitQueued:
		g.finishLocked(w, why)
	case w.state == waitAdmitted && why == waitCancelled:
		g.n.cancelled++
		g.freeLocked(w.lease.s, g.clock.Now())
		w.lease = Lease{}
	}
	if why == waitCancelled && w.state != waitTimedOut {
		return Lease{}, ctxErr
	}
	return w.result()
}

// release ends the lease (s, gen) at now with outcome o.
func (g *Gate) release(s *slot, gen uint64, now time.Time, o Outcome) {
	g.mu.Lock()
	if s.gen != gen {
		g.mu.Unlock()
		return
	}
	rtt := max(now.Sub(s.start), 0)
	g.stats.add(rtt, o)
	if g.overdue != nil && o == OK && s.start.After(g.newestDone) {
		g.newestDone, g.newestRTT = s.start, rtt
	}
	old := g.reportOverdueLocked(now)
	g.observeLocked(now, s.sample(rtt, o))
	g.freeLocked(s, now)
	g.unlock(old)
}

// observeLocked feeds s to the controller and takes its answers: the limit,
// and the overdue threshold.
func (g *Gate) observeLocked(now time.Time, s Sample) {
	g.setLimitLocked(g.ctrl.Observe(now, s))
	if g.overdue != nil {
		g.after = g.overdue.OverdueAfter()
	}
}

// unlock releases g.mu and, if the limit moved from old, tells
// OnLimitChange (never with the lock held).
func (g *Gate) unlock(old int) {
	limit, notify := g.limit, g.onLimitChange
	g.mu.Unlock()
	if notify != nil && limit != old {
		notify(old, limit)
	}
}

// reportOverdueLocked tells the controller of every request in flight that
// has become overdue at now (see OverdueReporter), oldest first, and returns the
// limit before, for unlock. Requests are admitted in time order, so only
// the oldest not yet reported need be looked at.
func (g *Gate) reportOverdueLocked(now time.Time) (old int) {
	old = g.limit
	for s := g.pending.head; s != nil && g.after > 0 && now.Sub(s.start) > g.after; s = g.pending.head {
		g.pending.remove(s)
		g.late.pushBack(s)
		s.stage = late
		g.observeLocked(now, s.sample(now.Sub(s.start), Overdue))
	}
	// An overdue request older than one already answered, and in flight for
	// more than twice that one's RTT, is lost, as TCP's RACK judges a
	// segment sent before one delivered: the backend answers newer requests
	// and not it (it dropped it, or it is stuck). Twice leaves room for the
	// order in which a loaded backend answers.
	for s := g.late.head; s != nil && s.start.Before(g.newestDone) && now.Sub(s.start) > 2*g.newestRTT; s = g.late.head {
		g.late.remove(s)
		s.stage = lost
		g.observeLocked(now, s.sample(now.Sub(s.start), Timeout))
	}
	return old
}

func (g *Gate) setLimitLocked(l int) {
	l = max(l, 1)
	switch {
	case l > g.limit:
		g.n.adjustedUp++
	case l < g.limit:
		g.n.adjustedDown++
	}
	g.limit = l
	g.limitNow.Store(int64(l))
}

// admitLocked takes a slot for a request admitted at now. The caller has
// checked inflight < limit.
func (g *Gate) admitLocked(now time.Time) Lease {
	s := g.free
	if s != nil {
		g.free, s.next = s.next, nil
	} else {
		s = new(slot)
	}
	g.inflight++
	s.start, s.inflight, s.limit, s.ceiling, s.load, s.stage = now, g.inflight, g.limit, 0, 0, onTime
	if g.overdue != nil {
		g.pending.pushBack(s)
	}
	g.n.allowed++
	return Lease{g: g, s: s, gen: s.gen}
}

// freeLocked retires s (so every copy of its lease goes stale), returns it
// to the free list and admits waiters into the room.
func (g *Gate) freeLocked(s *slot, now time.Time) {
	s.gen++
	g.inflight--
	if g.overdue != nil {
		switch s.stage {
		case onTime:
			g.pending.remove(s)
		case late:
			g.late.remove(s)
		}
	}
	s.next, g.free = g.free, s
	g.admitWaitersLocked(now)
}

// admitWaitersLocked admits waiters, in queue order, into the room under
// the limit at now.
func (g *Gate) admitWaitersLocked(now time.Time) {
	g.expireOldestLocked(now)
	for g.inflight < g.limit && g.queue.len > 0 {
		w := g.queue.head
		if g.lifo {
			w = g.queue.tail
		}
		if w.expired(now) {
			g.finishLocked(w, waitTimedOut)
			continue
		}
		w.lease = g.admitLocked(now)
		g.finishLocked(w, waitAdmitted)
	}
}

// expireOldestLocked times out the waiters at the head of the queue whose
// deadline has passed at now, so they neither run nor hold queue room.
func (g *Gate) expireOldestLocked(now time.Time) {
	for w := g.queue.head; w != nil && w.expired(now); w = g.queue.head {
		g.finishLocked(w, waitTimedOut)
	}
}

// finishLocked takes w out of the queue in its final state and wakes it.
func (g *Gate) finishLocked(w *waiter, state waitState) {
	g.queue.remove(w)
	w.state = state
	switch state {
	case waitTimedOut:
		g.n.timedOutInQueue++
	case waitCancelled:
		g.n.cancelled++
	}
	close(w.ready)
}
