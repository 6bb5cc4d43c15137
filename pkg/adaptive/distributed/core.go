package distributed

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Aggregate is how the coordinator folds the live nodes' local limits into
// the global ceiling. Never a sum: each node infers a ceiling for the whole
// backend, and a sum would admit N times it.
type Aggregate uint8

const (
	// Min takes the smallest local limit: the most cautious node decides.
	Min Aggregate = iota
	// Median takes the lower median: one outlier cannot move the ceiling.
	Median
	// Mean takes the mean, rounded down: every node's estimate counts for
	// its Nth part, so no one node's trough (a cut on noise only it saw)
	// sets the fleet's ceiling, as it does under Min, while a congestion
	// every node sees lowers it as much as theirs. Σ in flight ≤ L_global
	// holds whatever the aggregate: the shares are cut from L_global.
	Mean
)

func (a Aggregate) String() string {
	switch a {
	case Min:
		return "min"
	case Median:
		return "median"
	case Mean:
		return "mean"
	}
	return fmt.Sprintf("Aggregate(%d)", uint8(a))
}

// Split is how the coordinator divides the global ceiling into targets.
type Split uint8

const (
	// Equal gives each live node ⌊L/N⌋, the remainder one slot each to
	// L mod N nodes in nodeId order, starting from the one whose turn it is:
	// the turn moves one node on every lease TTL of the coordinator's clock
	// (turn = ⌊now / LeaseTTL⌋ mod N). With L below N, the nodes with no
	// slot change each lease, so none is left for good without a request
	// to measure the backend by.
	Equal Split = iota
	// Demand gives each live node one slot, so an idle node can still show
	// demand, and the rest of the ceiling in proportion to the nodes'
	// reported demands (Equal when no node reports any, or when the ceiling
	// has fewer slots than there are nodes).
	Demand
)

func (s Split) String() string {
	switch s {
	case Equal:
		return "equal"
	case Demand:
		return "demand"
	}
	return fmt.Sprintf("Split(%d)", uint8(s))
}

// Config is what every node of one gate agrees on; each heartbeat carries it.
type Config struct {
	// LeaseTTL is how long a node's record lives without a heartbeat.
	LeaseTTL  time.Duration
	Aggregate Aggregate
	Split     Split
	// Handoff turns on acknowledged handoff: a node's reserve is the highest
	// share issued to it and not yet acknowledged, until it echoes the
	// generation, rather than its latest share.
	Handoff bool
}

// Report is one node's heartbeat: a snapshot taken atomically before the
// call.
type Report struct {
	// Node is the node's identity; required.
	Node string
	// Instance tells two processes claiming one Node apart: a process picks
	// it at start. A live record of another instance is a duplicate nodeId.
	Instance string
	// Seq increases strictly with each heartbeat of an instance.
	Seq uint64
	// Local is the node's own inferred limit, L_local ≥ 1.
	Local int
	// Inflight is the node's requests in flight when the snapshot was taken.
	Inflight int
	// AppliedGen is the generation of the latest grant the node applied.
	AppliedGen uint64
	// Demand is the node's demand (in flight plus waiting), for Split Demand.
	Demand int
}

// Record is a node's entry in the coordinator's state for one gate.
type Record struct {
	Node, Instance string
	Seq            uint64
	Local          int
	Inflight       int
	Demand         int
	AppliedGen     uint64
	// ExpiresAt is when the record dies without a heartbeat: µs since the
	// epoch on the coordinator's clock.
	ExpiresAt int64
	// Share is the latest share granted, at generation Gen.
	Share int
	Gen   uint64
	// High is the highest share issued to the node since the generation it
	// last acknowledged, that one's included: what it may still be
	// admitting under. Maintained with or without Handoff.
	High int
}

// reserve is what a record holds back from the other nodes' shares.
func (r *Record) reserve(handoff bool) int {
	if handoff && r.AppliedGen < r.Gen {
		return max(r.High, r.Inflight)
	}
	return max(r.Share, r.Inflight)
}

// Status says what a heartbeat did.
type Status uint8

const (
	// Granted: the report was recorded and a share granted.
	Granted Status = iota + 1
	// Stale: the report was older than the recorded one (seq not above it)
	// and changed nothing; the grant repeats the recorded share.
	Stale
)

func (s Status) String() string {
	switch s {
	case Granted:
		return "granted"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Grant is the coordinator's answer to a heartbeat.
type Grant struct {
	Status Status
	// Share is the node's share of the global ceiling, at generation Gen.
	Share int
	Gen   uint64
	// Global is the global ceiling L_global; Live the nodes it is split
	// among, the reporter included.
	Global, Live int
	// ExpiresAt is when the node's record dies without another heartbeat,
	// and Now the coordinator's clock at the grant (µs since the epoch): the
	// node carries the lease end over to its clock by their difference.
	ExpiresAt, Now int64
}

// MaxCount bounds a report's Local, Inflight and Demand: up to it no sum or
// product Beat computes overflows (nor leaves the integers a double holds
// exactly, which the Redis script computes in). A report above it is bad.
const MaxCount = 1<<26 - 1

// MaxGen bounds a report's AppliedGen. A record numbers its generations on
// from the highest one its node echoes (Beat), so echoes bound them: from
// below it, 2^52 more heartbeats keep every generation an integer a double
// holds exactly (the Redis script's numbers). A report above it is bad; no
// node reaches it by beating.
const MaxGen = 1 << 52

// ErrDuplicateNode is returned for a report whose Node has a live record of
// another Instance: two processes share a nodeId. The state is unchanged.
var ErrDuplicateNode = errors.New("distributed: duplicate live nodeId")

// ErrBadReport is wrapped by the errors Beat returns for a malformed report.
var ErrBadReport = errors.New("distributed: bad report")

// Validate reports whether the report can be recorded.
func (r Report) Validate() error {
	switch {
	case r.Node == "":
		return fmt.Errorf("%w: empty nodeId", ErrBadReport)
	case r.Seq < 1:
		return fmt.Errorf("%w: node %q seq 0, want ≥ 1 (strictly increasing per instance)", ErrBadReport, r.Node)
	case r.Local < 1:
		return fmt.Errorf("%w: node %q local limit %d, want ≥ 1", ErrBadReport, r.Node, r.Local)
	case r.Inflight < 0 || r.Demand < 0:
		return fmt.Errorf("%w: node %q inflight %d, demand %d, want ≥ 0", ErrBadReport, r.Node, r.Inflight, r.Demand)
	case r.Local > MaxCount || r.Inflight > MaxCount || r.Demand > MaxCount:
		return fmt.Errorf("%w: node %q local %d, inflight %d, demand %d, want each ≤ %d",
			ErrBadReport, r.Node, r.Local, r.Inflight, r.Demand, MaxCount)
	case r.AppliedGen > MaxGen:
		return fmt.Errorf("%w: node %q applied generation %d, want ≤ %d", ErrBadReport, r.Node, r.AppliedGen, uint64(MaxGen))
	}
	return nil
}

// Validate reports whether the config can be used.
func (c Config) Validate() error {
	switch {
	case c.LeaseTTL < time.Microsecond:
		return fmt.Errorf("distributed: lease TTL %v, want ≥ 1µs", c.LeaseTTL)
	case c.Aggregate > Mean:
		return fmt.Errorf("distributed: unknown aggregate %v", c.Aggregate)
	case c.Split > Demand:
		return fmt.Errorf("distributed: unknown split %v", c.Split)
	}
	return nil
}

// Beat is the heartbeat core, the one computation every coordinator runs:
// the Redis script transcribes it and is held to it step for step. Given a
// gate's records (in any order), a report and the coordinator's clock now
// (µs since the epoch), it returns the records after the beat (sorted by
// Node; recs itself is not modified) and the grant:
//
//  1. Upsert the reporter: a live record of another instance is a
//     duplicate (ErrDuplicateNode); a seq not above the recorded one is
//     Stale and changes nothing.
//  2. Evict the records whose lease has expired; the reporter survives.
//  3. Aggregate the live local limits into L_global (Min, lower Median or
//     Mean rounded down).
//  4. Target: the reporter's part of L_global by the Split (Equal's
//     remainder rotating with the lease's turn, ⌊now / LeaseTTL⌋).
//  5. Cap: share = max(0, min(target, L_global − Σ_other reserve)), where a
//     node's reserve is max(share, inflight), or with Handoff, until it
//     acknowledges its latest generation, max(high, inflight).
//
// While L_global is constant (the nodes' local limits agree), Σ share ≤
// L_global holds after every beat whatever the interleaving, and so does
// Σ inflight ≤ L_global with Handoff (docs/PROOFS.md). When L_global falls,
// the shares granted under the higher ceiling stand until their holders
// beat again; no beat adds over-commitment meanwhile (Σ share after a beat
// ≤ max(L_global, Σ share before)), so the fleet is back under the new
// ceiling within one heartbeat round.
func Beat(recs []Record, rep Report, cfg Config, now int64) ([]Record, Grant, error) {
	if err := rep.Validate(); err != nil {
		return recs, Grant{}, err
	}
	if err := cfg.Validate(); err != nil {
		return recs, Grant{}, err
	}
	out := make([]Record, 0, len(recs)+1)
	self := -1
	for _, r := range recs {
		if r.Node == rep.Node {
			switch {
			case r.Instance != rep.Instance && r.ExpiresAt > now:
				return recs, Grant{}, fmt.Errorf("%w: %q is live as instance %q, reported by instance %q",
					ErrDuplicateNode, rep.Node, r.Instance, rep.Instance)
			case r.Instance == rep.Instance && rep.Seq <= r.Seq:
				return recs, stale(recs, r, now), nil
			}
			self = len(out)
		} else if r.ExpiresAt <= now {
			continue // evicted
		}
		out = append(out, r)
	}
	if self < 0 {
		self = len(out)
		out = append(out, Record{Node: rep.Node})
	}
	me := &out[self]
	if me.Instance != rep.Instance {
		*me = Record{Node: rep.Node} // a new incarnation starts afresh
	}
	me.Instance, me.Seq, me.Local, me.Inflight, me.Demand = rep.Instance, rep.Seq, rep.Local, rep.Inflight, rep.Demand
	// A node applies only grants above the generation in force, so every
	// generation up to the one it echoes is spent for it: a record that
	// never issued that one (recreated after an eviction, or its state
	// lost) numbers on above it. Its grants are then news to the node, and
	// no echo of the old numbering can pass for an acknowledgement of one.
	me.Gen = max(me.Gen, rep.AppliedGen)
	me.AppliedGen = max(me.AppliedGen, rep.AppliedGen)
	if me.AppliedGen == me.Gen {
		me.High = me.Share // acknowledged: it admits under its latest share
	}
	me.ExpiresAt = now + cfg.LeaseTTL.Microseconds()

	slices.SortFunc(out, func(a, b Record) int { return cmpString(a.Node, b.Node) })
	for i := range out {
		if out[i].Node == rep.Node {
			self = i
		}
	}
	me = &out[self]
	global := aggregate(out, cfg.Aggregate)
	target := targetOf(out, self, global, cfg.Split, now/cfg.LeaseTTL.Microseconds())
	free := global
	for i := range out {
		if i != self {
			free -= out[i].reserve(cfg.Handoff)
		}
	}
	share := max(0, min(target, free))
	me.Gen++
	me.Share = share
	me.High = max(me.High, share)
	return out, Grant{Status: Granted, Share: share, Gen: me.Gen, Global: global, Live: len(out),
		ExpiresAt: me.ExpiresAt, Now: now}, nil
}

// stale is the grant for a report older than the record: the recorded
// share, nothing changed.
func stale(recs []Record, r Record, now int64) Grant {
	live := 0
	for _, o := range recs {
		if o.ExpiresAt > now || o.Node == r.Node {
			live++
		}
	}
	// Global is not recomputed: a stale report changes nothing, and the
	// node applies nothing from a grant whose generation it has seen.
	return Grant{Status: Stale, Share: r.Share, Gen: r.Gen, Live: live, ExpiresAt: r.ExpiresAt, Now: now}
}

// aggregate folds the local limits of recs (≥ 1 record) into L_global.
func aggregate(recs []Record, a Aggregate) int {
	switch a {
	case Min:
		m := recs[0].Local
		for _, r := range recs[1:] {
			m = min(m, r.Local)
		}
		return m
	case Mean:
		// Each Local ≤ MaxCount: the sum fits (and stays below 2^53, exact
		// in the Redis script's doubles, for fewer than 2^27 nodes).
		sum := 0
		for _, r := range recs {
			sum += r.Local
		}
		return sum / len(recs)
	}
	locals := make([]int, len(recs))
	for i, r := range recs {
		locals[i] = r.Local
	}
	slices.Sort(locals)
	return locals[(len(locals)-1)/2]
}

// targetOf is recs[self]'s part of global by the split at the lease turn
// turn; recs is sorted by Node.
func targetOf(recs []Record, self, global int, s Split, turn int64) int {
	n := len(recs)
	if s == Demand {
		var total int
		for _, r := range recs {
			total += r.Demand
		}
		if total > 0 && global >= n {
			// One slot each first, so an idle node can show demand; the rest
			// in proportion to demand. Σ targets ≤ global.
			return 1 + (global-n)*recs[self].Demand/total
		}
	}
	// The remainder, one slot each to global mod n nodes, starting from the
	// one whose turn it is: with global < n the same nodes never go without
	// (a node admitting nothing measures nothing, and were its L_local the
	// lowest, L_global would stay there). Go's % truncates, as the Redis
	// script's math.fmod does.
	t := global / n
	first := int((turn%int64(n) + int64(n)) % int64(n))
	if (self-first+n)%n < global%n {
		t++
	}
	return t
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
