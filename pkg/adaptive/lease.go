package adaptive

import "time"

// Lease is one admitted request's hold on a Gate slot. It is a small value:
// copy it freely. Release it exactly once when the request ends; further
// Releases, of it or of any copy, do nothing. The zero Lease is a no-op.
// A Lease is safe to release from any goroutine.
type Lease struct {
	g   *Gate
	s   *slot
	gen uint64 // s.gen when the lease was issued
}

// Release records the request's Sample (RTT = now − admission, with outcome
// o) with the gate's controller, frees the slot and hands it to the next
// waiter, if the new limit allows. It is idempotent: only the first Release
// of a lease, through any of its copies, has an effect.
func (l Lease) Release(now time.Time, o Outcome) {
	if l.g != nil {
		l.g.release(l.s, l.gen, now, o)
	}
}

// slot is the gate's record of one admitted request. Slots are recycled
// through the gate's free list, so admission allocates nothing once the gate
// has seen its peak concurrency; gen tells a live lease from a stale copy.
type slot struct {
	gen      uint64    // bumped on every release; guarded by Gate.mu
	start    time.Time // admission time
	inflight int       // inflight at admission, itself included
	limit    int       // the limit at admission
	ceiling  int       // the ceiling below limit it was admitted under (TryAcquireBelow); 0: none
	load     int       // the fleet's load at admission (TryAcquireShare); 0: inflight is
	next     *slot     // free list link
	// links place the slot on the list its stage puts it on, in admission
	// order: Gate.pending while on time, Gate.late once reported overdue,
	// none once reported lost.
	links links[slot]
	stage slotStage
}

// sample is the Sample s's request makes, its RTT rtt and its outcome o.
func (s *slot) sample(rtt time.Duration, o Outcome) Sample {
	return Sample{Start: s.start, RTT: rtt, Inflight: s.inflight, Limit: s.limit, Ceiling: s.ceiling, Load: s.load, Outcome: o}
}

// slotStage is where an admitted request stands in the gate's overdue and
// loss detection (see OverdueReporter).
type slotStage uint8

const (
	onTime slotStage = iota // on Gate.pending
	late                    // reported Overdue; on Gate.late
	lost                    // reported lost (a Timeout); on no list
)

// waitState is where a queued request stands. It leaves waitQueued once, under
// Gate.mu, and then never changes.
type waitState uint8

const (
	waitQueued waitState = iota
	waitAdmitted
	waitTimedOut
	waitCancelled
)

// waiter is one request in a Gate's queue.
type waiter struct {
	links    links[waiter] // its place in the queue
	deadline time.Time     // zero: no deadline
	ready    chan struct{} // closed when state leaves waitQueued
	state    waitState     // guarded by Gate.mu until ready is closed
	lease    Lease         // set when admitted
}

// expired reports whether w's deadline has passed at now.
func (w *waiter) expired(now time.Time) bool {
	return !w.deadline.IsZero() && !now.Before(w.deadline)
}

// links are an element's place in an intrusive list.
type links[T any] struct{ prev, next *T }

// listed is what a list holds: a pointer to an element with links.
type listed[T any] interface {
	*T
	place() *links[T]
}

// list is an intrusive doubly linked list, oldest at the head: the gate's
// queue of waiters and its lists of slots in flight.
type list[T any, P listed[T]] struct {
	head, tail *T
	len        int
}

func (q *list[T, P]) pushBack(x *T) {
	l := P(x).place()
	l.prev, l.next = q.tail, nil
	if q.tail != nil {
		P(q.tail).place().next = x
	} else {
		q.head = x
	}
	q.tail = x
	q.len++
}

func (q *list[T, P]) remove(x *T) {
	l := P(x).place()
	if l.prev != nil {
		P(l.prev).place().next = l.next
	} else {
		q.head = l.next
	}
	if l.next != nil {
		P(l.next).place().prev = l.prev
	} else {
		q.tail = l.prev
	}
	l.prev, l.next = nil, nil
	q.len--
}

type (
	waitList = list[waiter, *waiter]
	slotList = list[slot, *slot]
)

func (w *waiter) place() *links[waiter] { return &w.links }
func (s *slot) place() *links[slot]     { return &s.links }
