package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// FenceConfig is one instance of the self-fencing model: one node ("a")
// holding a lease that the coordinator reclaims at its ExpiresAt, on the
// coordinator's clock, when another node's ("b") heartbeat evicts it; the
// node fences itself once its own clock reads ≥ its lease end − Margin.
//
// Time is discrete: both clocks read whole ticks (1 tick = 1µs, the unit of
// Beat's clock), and each step of either clock is a step of the search, so
// every order of the two clocks' ticks and of the events between them is
// explored. A FenceConfig is a small value: pass it by value.
type FenceConfig struct {
	// TTL is the lease TTL, ticks, ≥ 1 (distributed.Config.LeaseTTL).
	TTL int
	// Drift is D: over a run, the offset of the node's clock from the
	// coordinator's (node − coordinator) moves within a band of D ticks —
	// its largest value less its smallest is at most D. ≥ 0.
	Drift int
	// Offset is O: the offset a run starts with is any of −O..O. ≥ 0.
	Offset int
	// Margin is the fence safety margin, ticks, ≥ 0.
	Margin int
	// Hold is R: a request admitted at node reading t may be in flight
	// through node reading t + R (0: only at its admission). ≥ 0.
	Hold int
	// Beats is how many heartbeats the node sends, 1..2.
	Beats int
	// Absolute makes the node take Grant.ExpiresAt as a reading of its own
	// clock, rather than carrying the lease over to it as its send time +
	// (ExpiresAt − Now): the conversion that ignores the clocks' offset.
	Absolute bool
}

// Validate reports whether c can be explored.
func (c FenceConfig) Validate() error {
	switch {
	case c.TTL < 1 || c.TTL > 64:
		return fmt.Errorf("%w: TTL %d outside 1..64", ErrInvalidConfig, c.TTL)
	case c.Drift < 0 || c.Drift > 16 || c.Offset < 0 || c.Offset > 16:
		return fmt.Errorf("%w: drift %d, offset %d outside 0..16", ErrInvalidConfig, c.Drift, c.Offset)
	case c.Margin < 0 || c.Margin > c.TTL || c.Hold < 0 || c.Hold > 16:
		return fmt.Errorf("%w: margin %d outside 0..TTL, or hold %d outside 0..16", ErrInvalidConfig, c.Margin, c.Hold)
	case c.Beats < 1 || c.Beats > 2:
		return fmt.Errorf("%w: beats %d outside 1..2", ErrInvalidConfig, c.Beats)
	}
	return nil
}

// MinMargin is the least safe margin the model finds, stated in closed
// form: D + R with the lease carried over by durations (the offset cancels
// out), O + D + R when ExpiresAt is read as a time on the node's clock.
func (c FenceConfig) MinMargin() int {
	if c.Absolute {
		return c.Offset + c.Drift + c.Hold
	}
	return c.Drift + c.Hold
}

const never = math.MinInt32

// FenceState is one state of the self-fencing model.
//
// Invariants: Hi − Lo ≤ Drift, Lo ≤ N − C ≤ Hi.
type FenceState struct {
	// Started is set once the run's starting offset is chosen (ClockSet).
	Started bool
	// C and N are the coordinator's and the node's clock readings.
	C, N int
	// Lo and Hi are the least and largest offset N − C of the run so far.
	Lo, Hi int
	// Records are the coordinator's records, as Beat returned them.
	Records []distributed.Record
	// Sent is how many heartbeats the node sent; PeerSeq the peer's.
	Sent    int
	PeerSeq uint64
	// Reports and Grants are in flight: a report's seq and the node's
	// reading when it sent it; a grant and the send reading of its report.
	Reports []FenceReport
	Grants  []FenceGrant
	// Gen is the generation the node applied, and LeaseEnd its lease end
	// on its own clock (never: no lease).
	Gen      uint64
	LeaseEnd int
	// Busy is the last node reading at which a request it admitted may be
	// in flight (never: none admitted).
	Busy int
	// Reclaimed is set when a peer's beat evicted the node's record, and
	// cleared when the node's next beat records it afresh.
	Reclaimed bool
}

// FenceReport is a heartbeat in flight to the coordinator.
type FenceReport struct {
	Seq    uint64
	SentAt int
}

// FenceGrant is the coordinator's answer in flight back: its generation,
// and the lease end the node will take from it, on its own clock.
type FenceGrant struct {
	Gen      uint64
	LeaseEnd int
}

// Unsafe reports whether the node may have a request in flight while the
// coordinator has reclaimed its lease: the budget is given away twice.
func (s FenceState) Unsafe() bool { return s.Reclaimed && s.N <= s.Busy }

// FenceStep names a transition of the self-fencing model.
type FenceStep struct {
	Kind FenceKind
	// Arg is the offset chosen (ClockSet), or the index of the report or
	// grant in flight (FenceProcess, FenceDeliver).
	Arg int
}

// FenceKind is the kind of a FenceStep.
type FenceKind uint8

const (
	// ClockSet sets the node's clock to C + Arg.
	ClockSet FenceKind = iota + 1
	// CoordTick, NodeTick and BothTick advance one clock, or both at once.
	CoordTick
	NodeTick
	BothTick
	// FenceSend is the node sending a heartbeat.
	FenceSend
	// FenceProcess is the coordinator running distributed.Beat on a report.
	FenceProcess
	// FenceDeliver is a grant reaching the node, applied when its generation is
	// newer than the node's.
	FenceDeliver
	// FenceAdmit is the node admitting a request: its clock reads below its
	// lease end less the margin.
	FenceAdmit
	// PeerEvicts is another node's heartbeat: Beat evicts the node's record once
	// its lease has expired on the coordinator's clock.
	PeerEvicts
)

func (s FenceStep) String() string {
	switch s.Kind {
	case ClockSet:
		return fmt.Sprintf("node clock starts at offset %+d", s.Arg)
	case CoordTick:
		return "coordinator clock ticks"
	case NodeTick:
		return "node clock ticks"
	case BothTick:
		return "both clocks tick"
	case FenceSend:
		return "node sends a heartbeat"
	case FenceProcess:
		return fmt.Sprintf("coordinator processes heartbeat #%d", s.Arg)
	case FenceDeliver:
		return fmt.Sprintf("node gets grant #%d", s.Arg)
	case FenceAdmit:
		return "node admits"
	case PeerEvicts:
		return "peer heartbeat"
	}
	return fmt.Sprintf("FenceStep(%d)", s.Kind)
}

func (s FenceState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coord %d node %d", s.C, s.N)
	if r, ok := record(s.Records, "a"); ok {
		fmt.Fprintf(&b, " | record gen %d expires %d", r.Gen, r.ExpiresAt)
	} else if s.Reclaimed {
		b.WriteString(" | RECLAIMED")
	}
	if s.LeaseEnd != never {
		fmt.Fprintf(&b, " | lease gen %d ends %d", s.Gen, s.LeaseEnd)
	}
	if s.Busy >= s.N {
		fmt.Fprintf(&b, " | in flight through %d", s.Busy)
	}
	for _, g := range s.Grants {
		fmt.Fprintf(&b, " | grant(gen %d, lease end %d) in flight", g.Gen, g.LeaseEnd)
	}
	return b.String()
}

// Initial is the state before the run: the coordinator's clock at 0, the
// node's not yet set, no record, nothing in flight.
func (c FenceConfig) Initial() FenceState {
	return FenceState{LeaseEnd: never, Busy: never}
}

// Graph is the model as a graph to explore.
func (c FenceConfig) Graph() Graph[FenceState, FenceStep] {
	return Graph[FenceState, FenceStep]{Initial: c.Initial(), Next: c.Next, Key: c.key}
}

// Next returns every transition enabled in s.
func (c FenceConfig) Next(s FenceState) []Edge[FenceState, FenceStep] {
	var out []Edge[FenceState, FenceStep]
	add := func(st FenceStep, ns FenceState) { out = append(out, Edge[FenceState, FenceStep]{st, ns}) }
	if !s.Started {
		for o := -c.Offset; o <= c.Offset; o++ {
			ns := s
			ns.Started, ns.N, ns.Lo, ns.Hi = true, o, o, o
			add(FenceStep{ClockSet, o}, ns)
		}
		return out
	}
	tick := func(kind FenceKind, dc, dn int) {
		ns := s
		ns.C += dc
		ns.N += dn
		d := ns.N - ns.C
		ns.Lo, ns.Hi = min(ns.Lo, d), max(ns.Hi, d)
		if ns.Hi-ns.Lo <= c.Drift {
			add(FenceStep{Kind: kind}, ns)
		}
	}
	tick(CoordTick, 1, 0)
	tick(NodeTick, 0, 1)
	tick(BothTick, 1, 1)
	if s.Sent < c.Beats {
		ns := s
		ns.Sent++
		ns.Reports = append(slices.Clone(s.Reports), FenceReport{Seq: uint64(ns.Sent), SentAt: s.N})
		add(FenceStep{Kind: FenceSend}, ns)
	}
	cfg := distributed.Config{LeaseTTL: time.Duration(c.TTL) * time.Microsecond}
	for k, r := range s.Reports {
		ns := s
		_, hadRecord := record(s.Records, "a")
		recs, g, err := distributed.Beat(s.Records, distributed.Report{Node: "a", Instance: instance, Seq: r.Seq, Local: 1}, cfg, int64(s.C))
		if err != nil {
			panic(fmt.Sprintf("model: FenceSend refused a report the model built: %v", err))
		}
		ns.Records = recs
		if !hadRecord {
			ns.Reclaimed = false // recorded afresh: the coordinator counts the node again
		}
		ns.Reports = slices.Delete(slices.Clone(s.Reports), k, k+1)
		end := r.SentAt + int(g.ExpiresAt-g.Now) // the send reading + the lease's remaining duration
		if c.Absolute {
			end = int(g.ExpiresAt)
		}
		ns.Grants = append(slices.Clone(s.Grants), FenceGrant{Gen: g.Gen, LeaseEnd: end})
		add(FenceStep{FenceProcess, k}, ns)
	}
	for k, g := range s.Grants {
		ns := s
		ns.Grants = slices.Delete(slices.Clone(s.Grants), k, k+1)
		if g.Gen > s.Gen {
			ns.Gen, ns.LeaseEnd = g.Gen, g.LeaseEnd
		}
		add(FenceStep{FenceDeliver, k}, ns)
	}
	if s.LeaseEnd != never && s.N < s.LeaseEnd-c.Margin && s.N+c.Hold > s.Busy {
		ns := s
		ns.Busy = s.N + c.Hold
		add(FenceStep{Kind: FenceAdmit}, ns)
	}
	if _, ok := record(s.Records, "a"); ok {
		ns := s
		ns.PeerSeq++
		recs, _, err := distributed.Beat(s.Records, distributed.Report{Node: "b", Instance: instance, Seq: ns.PeerSeq, Local: 1}, cfg, int64(s.C))
		if err != nil {
			panic(fmt.Sprintf("model: FenceSend refused a report the model built: %v", err))
		}
		if _, still := record(recs, "a"); !still {
			ns.Records, ns.Reclaimed = recs, true
			add(FenceStep{Kind: PeerEvicts}, ns)
		}
		// A peer beat that evicts nothing changes nothing the node's lease
		// depends on; it is left out (the peer's record is not modelled).
	}
	return out
}

// key encodes s relative to the clocks' readings, with what is past
// mattering clamped, so that the space is finite although time is not
// bounded: a run may go on for ever, and any state it reaches is the
// translate of one with equal key.
//
// Every quantity on the coordinator's clock is encoded less C, every one on
// the node's less N: Beat compares the record's ExpiresAt with its now and
// sets it to now + TTL, and the node compares N with its lease end and its
// last request's; nothing reads a reading itself. The offset N − C itself is
// left out with the relative conversion — the node's lease end is its send
// reading plus a duration — and kept with the absolute one, whose lease end
// is a coordinator reading the node compares with its own. Clocks only
// advance, so a record expired (ExpiresAt − C ≤ 0) stays expired, a lease
// fenced (lease end − Margin − N ≤ 0) stays fenced, a request ended (Busy −
// N < 0) stays ended, and a report sent long ago (SentAt − N ≤ Margin − TTL)
// yields, as the lease's remaining duration is at most TTL, a lease fenced
// on arrival: each is clamped there. The peer's record and PeerSeq are left
// out: Beat reads the peer's record only to evict it and to size shares,
// which this model does not follow, and the peer's next seq is always above
// it.
func (c FenceConfig) key(b []byte, s FenceState) []byte {
	put := func(v int) { b = append(b, byte(v), byte(v>>8)) }
	fenced := func(end int) int { return max(end-c.Margin-s.N, 0) }
	d := s.N - s.C
	b = append(b, bit(s.Started), bit(s.Reclaimed), byte(s.Sent), byte(s.Gen))
	put(s.Lo - d)
	put(s.Hi - d)
	if c.Absolute { // a lease end read from the coordinator's clock compares N with a C-time
		put(d)
	}
	put(fenced(s.LeaseEnd))
	put(max(s.Busy-s.N, -1))
	if r, ok := record(s.Records, "a"); ok {
		b = append(b, 1, byte(r.Gen), byte(r.Seq))
		put(max(int(r.ExpiresAt)-s.C, 0))
	} else {
		b = append(b, 0)
	}
	b = append(b, byte(len(s.Reports)))
	for _, r := range s.Reports {
		b = append(b, byte(r.Seq))
		if !c.Absolute { // an absolute lease end does not read it
			put(max(r.SentAt-s.N, c.Margin-c.TTL))
		}
	}
	b = append(b, byte(len(s.Grants)))
	for _, g := range s.Grants {
		b = append(b, byte(g.Gen))
		put(fenced(g.LeaseEnd))
	}
	return b
}

// FenceResult is the explored space of one FenceConfig: its size, and the
// first unsafe state in BFS order (−1: none is reachable).
type FenceResult struct {
	Config FenceConfig
	Space  *Space[FenceState, FenceStep]
	Unsafe int
}

// CheckFence explores every run of c.
func CheckFence(c FenceConfig) (*FenceResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := &FenceResult{Config: c, Unsafe: -1}
	sp, err := Explore(c.Graph(), 0, func(i int, s FenceState) bool {
		if s.Unsafe() && r.Unsafe < 0 {
			r.Unsafe = i
		}
		return true
	})
	r.Space = sp
	return r, err
}

// Trace renders a shortest run to state i, one step a line.
func (r *FenceResult) Trace(i int) string {
	steps := r.Space.Path(i)
	states, err := Replay(r.Config.Graph(), steps)
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for k, st := range steps {
		if st.Kind == CoordTick || st.Kind == NodeTick || st.Kind == BothTick {
			if k+1 < len(steps) && steps[k+1].Kind == st.Kind {
				continue // runs of one tick are shown once, at their end
			}
		}
		fmt.Fprintf(&b, "%-40s %v\n", st, states[k])
	}
	return b.String()
}

func bit(b bool) byte {
	if b {
		return 1
	}
	return 0
}
