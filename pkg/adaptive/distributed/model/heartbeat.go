package model

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Config is one instance of the heartbeat protocol to explore. Nodes,
// Global and Flight are required; the rest switch behaviours on. A Config
// is a small value: pass it by value.
type Config struct {
	// Nodes is the fleet size, 1..3; the nodes are named "a", "b", "c".
	Nodes int
	// Global is every node's local limit, 1..6, and so (Aggregate Min over
	// equal locals) the constant global ceiling L_global.
	Global int
	// Flight bounds the messages of one node in flight at once, reports to
	// the coordinator and grant replies back together, 1..3. A node sends a
	// report only while fewer are in flight.
	Flight int
	// Handoff is distributed.Config.Handoff.
	Handoff bool
	// Lossy lets the network lose any message in flight.
	Lossy bool
	// Torn makes a report's snapshot non-atomic: the node samples its in
	// flight count (Sample) and builds the report later (Send), with the
	// applied generation of that later moment.
	Torn bool
	// Mutation, when not Faithful, breaks the coordinator's reserve on
	// purpose, to show that the model finds the hole (tests only).
	Mutation Mutation
}

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("model: invalid config")

// readsAck reports whether Beat, under c, reads a record's AppliedGen and
// High: only Handoff does, and not when the mutation hides High (the
// reserve is then max(Share, Inflight) either way) or zeroes it.
func (c Config) readsAck() bool {
	return c.Handoff && c.Mutation != ReserveIgnoresHigh && c.Mutation != ReserveInflightOnly
}

// Validate reports whether c can be explored.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1 || c.Nodes > len(nodeNames):
		return fmt.Errorf("%w: nodes %d outside 1..%d", ErrInvalidConfig, c.Nodes, len(nodeNames))
	case c.Global < 1 || c.Global > 6:
		return fmt.Errorf("%w: global %d outside 1..6", ErrInvalidConfig, c.Global)
	case c.Flight < 1 || c.Flight > maxFlight:
		return fmt.Errorf("%w: flight %d outside 1..%d", ErrInvalidConfig, c.Flight, maxFlight)
	case c.Mutation > ReserveInflightOnly:
		return fmt.Errorf("%w: unknown mutation %d", ErrInvalidConfig, c.Mutation)
	}
	return nil
}

// Mutation is a deliberately broken reserve rule. Beat itself is never
// changed: each mutation rewrites the other nodes' records in the copy
// passed to Beat and puts the rewritten fields back in the records it
// returns, so only the reserve computed for this one beat sees them.
type Mutation uint8

const (
	// Faithful calls Beat as it is.
	Faithful Mutation = iota
	// ReserveIgnoresInflight zeroes the other records' Inflight: the
	// reserve is the share (or, unacknowledged under Handoff, the high)
	// alone, never the reported occupancy.
	ReserveIgnoresInflight
	// ReserveIgnoresHigh sets the other records' High to their Share: the
	// reserve is max(share, inflight) even before an acknowledgement, so
	// Handoff changes nothing (the explored space is the one without it:
	// TestReserveTermsAreEachNecessary checks that they are equal).
	ReserveIgnoresHigh
	// ReserveInflightOnly zeroes the other records' Share and High: the
	// reserve is the reported occupancy alone.
	ReserveInflightOnly
)

func (m Mutation) String() string {
	switch m {
	case Faithful:
		return "faithful"
	case ReserveIgnoresInflight:
		return "reserve ignores inflight"
	case ReserveIgnoresHigh:
		return "reserve ignores the unacknowledged high"
	case ReserveInflightOnly:
		return "reserve is inflight only"
	}
	return fmt.Sprintf("Mutation(%d)", uint8(m))
}

var nodeNames = [...]string{"a", "b", "c"}

// The coordinator's clock stands still (no lease expires: the model has no
// eviction) and every record lives a second past it.
const (
	beatNow  = 1 // µs
	leaseTTL = time.Second
	instance = "1"
)

// State is one global state: the coordinator's records, as Beat returned
// them, and the nodes.
type State struct {
	// Records are the coordinator's records, sorted by Node; a node that
	// has not been heard from has none. Shared between states: never
	// modified in place.
	Records []distributed.Record
	// Nodes holds Config.Nodes nodes; the rest are zero.
	Nodes [maxNodes]Node
	n     uint8
}

// Fleet returns the nodes.
func (s *State) Fleet() []Node { return s.Nodes[:s.n] }

const (
	maxNodes  = len(nodeNames)
	maxFlight = 3
)

// Node is one node: what it applied, what it admits, what it sent. Its
// fields are narrow (a model explores millions of copies of it, and the
// race detector checks every byte copied); Validate keeps the counts in
// an int8 and a search deep enough to overflow the uint32s would not end.
//
// Invariant: 0 ≤ Inflight ≤ the largest Share the node ever applied, as it
// admits only while Inflight < min(Share, Global).
type Node struct {
	// Share and Gen are the latest grant the node applied; 0 and 0 before
	// any. It applies a grant only when its Gen is above Gen.
	Share int8
	Gen   uint32
	// Inflight is the node's requests in flight.
	Inflight int8
	// Seq is the sequence number of the last report it sent.
	Seq uint32
	// Sampled is the in flight count sampled for the next report (Torn);
	// −1 when none is.
	Sampled int8
	// Flight holds the node's messages in flight, the first Flights of it,
	// sorted (msgLess): any of them may be delivered next.
	Flight  [maxFlight]Msg
	Flights uint8
}

// InFlight returns the node's messages in flight.
func (n *Node) InFlight() []Msg { return n.Flight[:n.Flights] }

// with returns n with m in flight besides.
func (n Node) with(m Msg) Node {
	n.Flight[n.Flights] = m
	n.Flights++
	slices.SortFunc(n.Flight[:n.Flights], msgLess)
	return n
}

// without returns n with its k-th message in flight gone.
func (n Node) without(k int) Node {
	copy(n.Flight[k:], n.Flight[k+1:n.Flights])
	n.Flights--
	n.Flight[n.Flights] = Msg{}
	return n
}

// Msg is a message in flight: a node's report to the coordinator, or the
// coordinator's grant back to it.
type Msg struct {
	Grant bool
	// Inflight and Seq are a report's, Share a grant's; Gen is a report's
	// applied generation, a grant's generation.
	Inflight, Share int8
	Seq, Gen        uint32
}

func msgLess(a, b Msg) int {
	switch {
	case a.Grant != b.Grant:
		if !a.Grant {
			return -1
		}
		return 1
	case a.Seq != b.Seq:
		return cmpU(a.Seq, b.Seq)
	case a.Gen != b.Gen:
		return cmpU(a.Gen, b.Gen)
	case a.Inflight != b.Inflight:
		return int(a.Inflight) - int(b.Inflight)
	}
	return int(a.Share) - int(b.Share)
}

func cmpU(a, b uint32) int {
	if a < b {
		return -1
	}
	return 1
}

// StepKind names a transition.
type StepKind uint8

const (
	// Admit is a request the node admits: Inflight < min(Share, Global).
	Admit StepKind = iota + 1
	// Release is a request of the node ending.
	Release
	// Sample is a torn report's first half: the node reads its in flight
	// count (Config.Torn), at any time; the report leaves later.
	Sample
	// Send is the node sending a report: seq+1, its applied generation and
	// its in flight count (the sampled one, torn).
	Send
	// Process is the coordinator running Beat on a report in flight; the
	// grant goes back in flight in its place.
	Process
	// Apply is a grant reaching its node, applied when its generation is
	// newer than the node's.
	Apply
	// Lose is the network losing a message (Config.Lossy).
	Lose
)

// Step is one transition: its kind, its node, and the message sent,
// processed, delivered or lost (Msg), with the grant a Process sent back
// (Reply).
type Step struct {
	Kind  StepKind
	Node  int
	Msg   Msg
	Reply Msg
}

func (s Step) String() string {
	n := nodeNames[s.Node]
	switch s.Kind {
	case Admit:
		return n + " admits"
	case Release:
		return n + " releases"
	case Sample:
		return n + " samples inflight"
	case Send:
		return fmt.Sprintf("%s sends %v", n, s.Msg)
	case Process:
		return fmt.Sprintf("coord beats %s %v → %v", n, s.Msg, s.Reply)
	case Apply:
		return fmt.Sprintf("%s gets %v", n, s.Msg)
	case Lose:
		return fmt.Sprintf("network loses %s's %v", n, s.Msg)
	}
	return fmt.Sprintf("Step(%d)", s.Kind)
}

func (m Msg) String() string {
	if m.Grant {
		return fmt.Sprintf("grant(share %d, gen %d)", m.Share, m.Gen)
	}
	return fmt.Sprintf("report(seq %d, applied %d, inflight %d)", m.Seq, m.Gen, m.Inflight)
}

// Initial is the state before anything happens: no records, every node
// with no grant, nothing in flight.
func (c Config) Initial() State {
	s := State{n: uint8(c.Nodes)}
	for i := range s.Fleet() {
		s.Nodes[i].Sampled = -1
	}
	return s
}

// Graph is the protocol as a graph to explore: Next interleaves every
// node's steps and every delivery, Key identifies states up to a renaming
// of sequence numbers and generations that keeps their order (key.go).
func (c Config) Graph() Graph[State, Step] {
	return Graph[State, Step]{Initial: c.Initial(), Next: c.Next, Key: c.key}
}

// Next returns every transition enabled in s.
func (c Config) Next(s State) []Edge[State, Step] {
	out := make([]Edge[State, Step], 0, 16)
	for i, n := range s.Fleet() {
		edge := func(st Step, after Node, recs []distributed.Record) {
			ns := s
			if recs != nil {
				ns.Records = recs
			}
			ns.Nodes[i] = after
			out = append(out, Edge[State, Step]{st, ns})
		}
		if int(n.Inflight) < min(int(n.Share), c.Global) {
			m := n
			m.Inflight++
			edge(Step{Kind: Admit, Node: i}, m, nil)
		}
		if n.Inflight > 0 {
			m := n
			m.Inflight--
			edge(Step{Kind: Release, Node: i}, m, nil)
		}
		if c.Torn && n.Sampled < 0 {
			m := n
			m.Sampled = n.Inflight
			edge(Step{Kind: Sample, Node: i}, m, nil)
		}
		if int(n.Flights) < c.Flight {
			switch {
			case c.Torn && n.Sampled < 0:
			default:
				rep := Msg{Seq: n.Seq + 1, Gen: n.Gen, Inflight: n.Inflight}
				if c.Torn {
					rep.Inflight = n.Sampled
				}
				m := n.with(rep)
				m.Seq, m.Sampled = rep.Seq, -1
				edge(Step{Kind: Send, Node: i, Msg: rep}, m, nil)
			}
		}
		for k, msg := range n.InFlight() {
			if k > 0 && n.Flight[k-1] == msg {
				continue // the same message twice: one transition
			}
			m := n.without(k)
			if c.Lossy {
				edge(Step{Kind: Lose, Node: i, Msg: msg}, m, nil)
			}
			if !msg.Grant {
				recs, g := c.beat(s.Records, i, msg)
				reply := Msg{Grant: true, Gen: uint32(g.Gen), Share: int8(g.Share)}
				edge(Step{Kind: Process, Node: i, Msg: msg, Reply: reply}, m.with(reply), recs)
				continue
			}
			if msg.Gen > n.Gen {
				m.Share, m.Gen = msg.Share, msg.Gen
			}
			edge(Step{Kind: Apply, Node: i, Msg: msg}, m, nil)
		}
	}
	return out
}

// beat runs distributed.Beat on node i's report, under c's mutation. It
// never returns nil records: an empty result is an empty non-nil slice.
func (c Config) beat(recs []distributed.Record, i int, msg Msg) ([]distributed.Record, distributed.Grant) {
	rep := distributed.Report{Node: nodeNames[i], Instance: instance, Seq: uint64(msg.Seq), Local: c.Global,
		Inflight: int(msg.Inflight), AppliedGen: uint64(msg.Gen), Demand: int(msg.Inflight)}
	cfg := distributed.Config{LeaseTTL: leaseTTL, Aggregate: distributed.Min, Split: distributed.Equal, Handoff: c.Handoff}
	in := recs
	if c.Mutation != Faithful {
		in = slices.Clone(recs)
		for k := range in {
			if in[k].Node == rep.Node {
				continue
			}
			switch c.Mutation {
			case ReserveIgnoresInflight:
				in[k].Inflight = 0
			case ReserveIgnoresHigh:
				in[k].High = in[k].Share
			case ReserveInflightOnly:
				in[k].Share, in[k].High = 0, 0
			}
		}
	}
	out, g, err := distributed.Beat(in, rep, cfg, beatNow)
	if err != nil {
		panic(fmt.Sprintf("model: Beat refused a report the model built: %v", err)) // a bug of the model
	}
	out = slices.Clone(out)
	if c.Mutation != Faithful {
		for k := range out {
			if j := slices.IndexFunc(recs, func(r distributed.Record) bool { return r.Node == out[k].Node }); j >= 0 && out[k].Node != rep.Node {
				out[k] = recs[j] // Beat does not change the other records
			}
		}
	}
	if out == nil {
		out = []distributed.Record{}
	}
	return out, g
}
