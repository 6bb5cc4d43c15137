package distributed

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

// How a node ends. A process shutting down leaves (Leave). A process whose
// gate goes out of use while it runs (a policy reload) drains the node
// first (Drain), then leaves; or, when the gate is rebuilt under the same
// name, the new gate's node takes the old one over (TakeOver) and the
// coordinator never sees a second instance of the process's nodeId.

// ErrLeft is Beat's error after Leave, or once another node took the node
// over.
var ErrLeft = errors.New("distributed: the node has left the fleet")

// ErrInFlight is wrapped by Leave's error when requests are still in
// flight.
var ErrInFlight = errors.New("distributed: cannot leave with requests in flight")

// ErrNotSuccessor is wrapped by TakeOver's error when the node cannot take
// the other over; neither node is changed.
var ErrNotSuccessor = errors.New("distributed: cannot take the node over")

// Leave takes the node out of its fleet for good, for a process that is
// shutting down: from now on it admits nothing and beats no more, and when
// its coordinator is a Leaver its record is removed at once, so the other
// nodes take its share at their next beats instead of when its lease ends.
// Call it once Run has returned and the requests in flight have drained
// (Drain says when): with any in flight it returns an error wrapping
// ErrInFlight and leaves nothing (its record must go on reserving them;
// the lease ends on its own). A beat still under way may land after the
// removal and recreate the record; that only reserves more, until its
// lease ends. Leave reports whether a record was removed. A node taken
// over (TakeOver) has no record of its own: Leave does nothing.
func (n *Node) Leave(ctx context.Context) (bool, error) {
	n.mu.Lock()
	if n.next.Load() != nil {
		n.mu.Unlock()
		return false, nil // the record is the successor's
	}
	if in := n.inflightLocked(); in > 0 && !n.left {
		n.mu.Unlock()
		return false, fmt.Errorf("%w: node %q, gate %q, %d requests: its lease reserves them until it ends", ErrInFlight, n.id, n.key, in)
	}
	// Under the lock TryAcquire takes: no admission can slip in between
	// the check and the flag.
	n.left = true
	instance := n.instance
	n.mu.Unlock()
	lv, ok := n.coord.(Leaver)
	if !ok {
		return false, nil
	}
	removed, err := lv.Leave(ctx, n.key, n.id, instance)
	if err != nil {
		return false, fmt.Errorf("distributed: node %q leaving gate %q: %w", n.id, n.key, err)
	}
	return removed, nil
}

// Drain stops the node admitting, for a gate going out of use: from now on
// it refuses every request (ModeDraining), while Run, if it runs, beats on,
// so that the node's record goes on reserving the requests still in
// flight. The channel it returns is closed once none is (at once if none
// is), or once another node takes this one over; then stop Run and Leave.
// Every call returns the same channel.
func (n *Node) Drain() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.drained == nil {
		n.drained = make(chan struct{})
		n.draining.Store(true)
	}
	n.shutDrainedLocked(n.inflightLocked())
	return n.drained
}

// shutDrainedLocked closes Drain's channel once in, the node's in flight,
// is 0 or the node was taken over.
func (n *Node) shutDrainedLocked(in int) {
	if n.drained != nil && !n.drainedShut && (in == 0 || n.next.Load() != nil) {
		close(n.drained)
		n.drainedShut = true
	}
}

// TakeOver makes n carry on prev's part in the fleet, for a gate rebuilt
// under the same name in the same process (a policy reload that changed
// it): n takes prev's record at the coordinator (its instance and seq),
// the grant prev admits under (share, generation, lease end; so n admits at
// once, and its first beat is no duplicate nodeId), and prev's requests in
// flight, which count toward n's ceiling and in its reports until they
// end. From then on prev admits nothing of its own: it passes TryAcquire
// and Stats on to n, its Beat returns ErrLeft, its Leave does nothing, and
// its Drain channel is closed.
//
// Call it before n's first Beat or Run and before n admits; prev's Run
// should be stopped just after (a beat of prev still under way is harmless:
// the coordinator answers n's reports above its seq). n and prev must have
// the same Node and Gate and the same Coordinator, and prev must not have
// left; else TakeOver returns an error wrapping ErrNotSuccessor and
// changes nothing (prev then drains and leaves, and n joins afresh).
// Counters (Stats' totals) are n's own.
func (n *Node) TakeOver(prev *Node) error {
	switch {
	case prev == nil || prev == n || prev.gate == n.gate:
		return fmt.Errorf("%w: node %q cannot take over itself, nil or a node of its own gate", ErrNotSuccessor, n.id)
	case prev.id != n.id || prev.key != n.key:
		return fmt.Errorf("%w: node %q of gate %q cannot take over node %q of gate %q: the record is another's", ErrNotSuccessor, n.id, n.key, prev.id, prev.key)
	case !sameCoordinator(n.coord, prev.coord):
		return fmt.Errorf("%w: node %q of gate %q: the coordinator changed; the old node leaves and this one joins afresh", ErrNotSuccessor, n.id, n.key)
	}
	prev.mu.Lock() // prev before n: n locks no node it took over
	defer prev.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.seq > 0 || n.left || n.draining.Load() || n.next.Load() != nil || n.gate.Inflight() > 0:
		return fmt.Errorf("%w: node %q of gate %q is in use already: take over before its first beat or admission", ErrNotSuccessor, n.id, n.key)
	case prev.left:
		return fmt.Errorf("%w: node %q of gate %q has left the fleet: nothing to take over", ErrNotSuccessor, prev.id, prev.key)
	case prev.next.Load() != nil:
		return fmt.Errorf("%w: node %q of gate %q was taken over already", ErrNotSuccessor, prev.id, prev.key)
	}
	n.instance, n.seq = prev.instance, prev.seq
	n.appliedGen, n.share, n.global, n.live, n.leaseEnd = prev.appliedGen, prev.share, prev.global, prev.live, prev.leaseEnd
	n.okSeq, n.failSeq, n.dupSeq, n.fenceFired = prev.okSeq, prev.failSeq, prev.dupSeq, prev.fenceFired
	n.issuedGen, n.ackedGen, n.refusedSince = prev.issuedGen, prev.ackedGen, prev.refusedSince
	// prev's gate, and those it took over, admit no more once next is
	// set: the ones with nothing in flight are done with.
	n.priors = slices.DeleteFunc(append(slices.Clone(prev.priors), prev.gate), func(g *adaptive.Gate) bool { return g.Inflight() == 0 })
	prev.next.Store(n)
	prev.drainArmed.Store(false)
	prev.shutDrainedLocked(0)
	if n.eager != nil {
		n.drainArmed.Store(n.inflightLocked() > n.share)
	}
	return nil
}

// sameCoordinator reports whether a and b are one coordinator (comparing
// interfaces of an uncomparable dynamic type would panic).
func sameCoordinator(a, b Coordinator) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta != nil && ta.Comparable() && a == b
}

// latest is the node that counts n's requests now: n, or the last of the
// nodes that took it over.
func (n *Node) latest() *Node {
	for {
		next := n.next.Load()
		if next == nil {
			return n
		}
		n = next
	}
}

// inflightLocked is the node's requests in flight: its gate's and its
// priors'.
func (n *Node) inflightLocked() int {
	return n.gate.Inflight() + n.priorInflightLocked()
}

func (n *Node) priorInflightLocked() int {
	in := 0
	for _, g := range n.priors {
		in += g.Inflight()
	}
	return in
}
