package distributed

import (
	"time"
)

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
