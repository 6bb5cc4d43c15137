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
	next     *slot     // free list link
	// older and newer link the slot into the list its stage puts it on,
	// in admission order: Gate.pending while on time, Gate.late once
	// reported overdue, none once reported lost.
	older, newer *slot
	stage        slotStage
}

// slotStage is where an admitted request stands in the gate's overdue and
// loss detection (see OverdueReporter).
type slotStage uint8

const (
	onTime slotStage = iota // on Gate.pending
	late                    // reported Overdue; on Gate.late
	lost                    // reported lost (a Timeout); on no list
)

// slotList is an intrusive doubly linked list of slots in admission order,
// oldest at the head.
type slotList struct{ head, tail *slot }

func (q *slotList) pushBack(s *slot) {
	s.older, s.newer = q.tail, nil
	if q.tail != nil {
		q.tail.newer = s
	} else {
		q.head = s
	}
	q.tail = s
}

func (q *slotList) remove(s *slot) {
	if s.older != nil {
		s.older.newer = s.newer
	} else {
		q.head = s.newer
	}
	if s.newer != nil {
		s.newer.older = s.older
	} else {
		q.tail = s.older
	}
	s.older, s.newer = nil, nil
}

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
	prev, next *waiter
	deadline   time.Time     // zero: no deadline
	ready      chan struct{} // closed when state leaves waitQueued
	state      waitState     // guarded by Gate.mu until ready is closed
	lease      Lease         // set when admitted
}

// expired reports whether w's deadline has passed at now.
func (w *waiter) expired(now time.Time) bool {
	return !w.deadline.IsZero() && !now.Before(w.deadline)
}

// waitList is an intrusive doubly linked list of waiters, oldest at the head.
type waitList struct {
	head, tail *waiter
	len        int
}

func (q *waitList) pushBack(w *waiter) {
	w.prev, w.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = w
	} else {
		q.head = w
	}
	q.tail = w
	q.len++
}

func (q *waitList) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.len--
}
