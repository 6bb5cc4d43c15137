package rlqs

import (
	"errors"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// DefaultGuard is Machine.Guard's zero value: the margin an assignment
// expires by before its window ends, covering one-way delivery latency.
const DefaultGuard = 250 * time.Millisecond

// MinWindow is the shortest window the machine serves: an assignment needs
// a whole second of TTL after the Guard.
const MinWindow = 2 * time.Second

// PriorShares: a stream whose demand is unknown (it has only subscribed),
// when no stream of the bucket has a known rate, is predicted at
// L/PriorShares per window. Its next report makes its rate known. The
// limit's own pace would let one sidecar whose Envoys subscribe first
// lease all of L for a window; at L/8 each, eight such Envoys can, and a
// lone Envoy gets at most L/8 in the window it subscribes in.
const PriorShares = 8

// DefaultMaxStreams is Machine.MaxStreams's zero value.
const DefaultMaxStreams = 4096

// Errors returned by the Machine.
var (
	// ErrInvalidMachine is wrapped by Validate's errors.
	ErrInvalidMachine = errors.New("rlqs: invalid machine")
	// ErrInvalidReport is returned by Report for counts or an elapsed time
	// out of range; the bucket is unchanged.
	ErrInvalidReport = errors.New("rlqs: invalid report")
	// ErrTooManyStreams is returned by Report for a new stream when the
	// bucket has MaxStreams already; the bucket is unchanged.
	ErrTooManyStreams = errors.New("rlqs: too many streams on one bucket")
)

// MaxReportCount is the most requests (allowed + denied) one report may
// carry; more is ErrInvalidReport.
const MaxReportCount = gale.MaxLimit

// Machine is the assignment protocol of one bucket on one serving sidecar:
// the transitions of a Bucket. It is pure (no locks, goroutines, clock or
// I/O) and a small value; a Machine is safe for concurrent use, a Bucket
// is not (its driver serialises the calls on one bucket).
//
// Instants are the sidecar's clock; the store's instants are mapped to it
// by their distance from gale.Grant.Now, as gale.Machine does.
type Machine struct {
	// Limit is L, the units per window of the bucket's limit. 1..gale.MaxLimit.
	Limit int64
	// Window is the limit's window, at least MinWindow (2 s).
	Window time.Duration
	// Guard is how long before its window's end an assignment expires
	// (covering one-way delivery latency); 0 means DefaultGuard.
	Guard time.Duration
	// MaxStreams bounds the streams one bucket tracks; 0 means
	// DefaultMaxStreams.
	MaxStreams int
	// Fault is a deliberate defect, for the model's mutation checks only:
	// the zero value in every real server.
	Fault Fault
}

// Fault names a deliberate defect of a Machine. The model must find each.
type Fault uint8

const (
	// FaultCeilTTL rounds an assignment's TTL up, without the Guard: the
	// assignment outlives its window.
	FaultCeilTTL Fault = 1 << iota
	// FaultNoGuard rounds the TTL down but without the Guard: the
	// assignment outlives its window when delivery takes time.
	FaultNoGuard
	// FaultTopUpDifference tops up an Envoy that holds an assignment and
	// reports more demand mid-window, charging only the increase of
	// max_tokens (a replacement starts full on older Envoys).
	FaultTopUpDifference
	// FaultRefreshTTL resends an Envoy's assignment (an "equal" bucket,
	// which keeps its tokens) on each of its reports with a TTL of a whole
	// window: the live bucket reaches past its window.
	FaultRefreshTTL
	// FaultReassignOnLeave gives a leaving Envoy's share back to the store
	// mid-window, while the Envoy may still enforce its cached assignment.
	FaultReassignOnLeave
	// FaultNoSeal sends no DENY_ALL ahead of an assignment's expiry: an
	// Envoy under ALLOW_ALL admits unmetered from its expiry to the next
	// window's assignment.
	FaultNoSeal
)

// StreamID names one Envoy stream (one StreamRateLimitQuotas call) to the
// machine; the driver chooses them. A reconnect is a new stream.
type StreamID uint64

// Bucket is all state of one bucket on one sidecar. The zero value is a
// bucket nobody has reported.
type Bucket struct {
	// Streams are the streams subscribed to the bucket, in subscription
	// order.
	Streams []Stream
	// WindowEnd is the store window (store clock) of the newest grant, and
	// Until its end on the sidecar's clock; zero before any grant.
	WindowEnd time.Time
	Until     time.Time
	// Leased is what the sidecar leased from WindowEnd's window, Sent the
	// max_tokens sent out of it, Returned what went back. Invariant:
	// Sent + Returned ≤ Leased.
	Leased, Sent, Returned int64
	// Lease names the lease in flight, 0 when none (at most one per
	// bucket); Leases counts the leases begun, naming each. LeaseSent is
	// when the one in flight was asked.
	Lease     uint64
	Leases    uint64
	LeaseSent time.Time
	// RefusedUntil: the store granted nothing; no lease is asked before it
	// (sidecar clock).
	RefusedUntil time.Time
	// Spent: the store answered that its window has nothing left until
	// this instant (sidecar clock): streams without an assignment are
	// denied until it.
	Spent time.Time
	// Failing: the last lease failed (Failed); cleared when one lands.
	Failing bool
	// Last is the latest instant the bucket has seen; an earlier instant
	// passed in is taken as Last.
	Last time.Time
	// Left are streams that left while their Envoy may still enforce what
	// it was sent (an assignment or a deny), kept until it may not: a new
	// stream of the same Group (the same client connection: the stream
	// reset, the connection did not) whose first report is a periodic one
	// (a bucket its Envoy had cached) takes the record over, so that its
	// Envoy is neither assigned twice in a window nor told DENY_ALL over
	// the bucket it still holds. A stream reset every 3 s across eight
	// Envoys had each reconnect refused its window's share and its live
	// bucket replaced by a deny (issue 41).
	Left []Stream

	out [1]Assignment // scratch for one assignment without allocating
	buf []Assignment  // scratch for a landing's assignments
	sc  split         // scratch for a landing's split
}

// Stream is one Envoy stream's view of the bucket.
type Stream struct {
	ID StreamID
	// Rate is the smoothed demand, requests per second, when Known (a
	// report with time elapsed has arrived).
	Rate  float64
	Known bool
	// Window is the store window (WindowEnd) of the assignment the stream
	// was sent, Share its max_tokens, Live the latest instant it may be
	// enforced (sent + TTL + Guard). Zero Window: none yet.
	Window time.Time
	Share  int64
	Live   time.Time
	// Expires is when the assignment's TTL ends counted from its sending
	// (the Envoy's own expiry is no earlier): from two Guards before it,
	// the stream is told DENY_ALL (see denyStarved), unless FailsClosed.
	Expires time.Time
	// FailsClosed: the stream subscribed with Envoy's immediate report of
	// a denied first request (elapsed 0, nothing allowed), so its Envoy's
	// no_assignment_behavior is DENY_ALL: an expired assignment leaves it
	// denying, and it is never told DENY_ALL (see denyStarved). A stream that subscribed
	// otherwise (a reconnect's periodic report, or a first request
	// allowed: ALLOW_ALL, Envoy's default) is taken to admit without one.
	FailsClosed bool
	// Denied is when the blanket DENY_ALL the stream was last sent ends
	// (see Assignment.Deny); zero: none sent.
	Denied time.Time
	// Group is the stream's Envoy connection (ReportFrom): a window's
	// grant is split among groups, then within each.
	Group uint64
	// Asked names the lease whose ask counted the stream's demand: a
	// lease's grant is split among the streams it was asked for, and a
	// stream that subscribed while it was in flight asks its own next. (A
	// lease sized for one stream, split among the four that had
	// subscribed by the time it landed, gave each an eighth of what it
	// asked for, and none was topped up: issue 41.)
	Asked uint64
	// Assigned is when the stream's newest assignment was sent (less a
	// Guard for its first one: see ReportFrom), Reported when its latest
	// report came. Hungry is the window (WindowEnd) in which the stream,
	// holding an assignment of it, reported requests denied over an
	// interval that began (at its previous report) no earlier than
	// Assigned: it has spent the assignment, and is topped up (see
	// Assignment.Fresh) from what the window has left.
	Assigned, Reported time.Time
	Hungry             time.Time
}

// Assignment is a TokenBucket QuotaAssignmentAction to send on a stream,
// or, with Deny, a blanket DENY_ALL for TTL.
type Assignment struct {
	Stream StreamID
	// MaxTokens is the bucket's size and its whole cost; TokensPerFill is 1.
	MaxTokens, TokensPerFill int64
	// FillInterval and TTL are whole seconds; TTL ≥ 1 s.
	FillInterval, TTL time.Duration
	// Deny: the stream gets nothing of the window in place and is told to
	// deny until its end, TTL rounded up to whole seconds (so it covers
	// the end; the next window's assignment replaces it). Under Envoy's
	// default no_assignment_behavior, ALLOW_ALL, an Envoy left without an
	// assignment admitted without limit for the whole window (2.0–3.1 L
	// at 3L demand, issue 41). MaxTokens is 0.
	Deny bool
	// Seal: a Deny to a stream that holds an assignment of the window in
	// place, sent ahead of its expiry (denyStarved); otherwise the stream
	// got no share of the window.
	Seal bool
	// Fresh: a top-up to a stream that spent its assignment of the window
	// in place. The driver sends it behind a blanket DENY_ALL in one
	// message, so that Envoy drops the live bucket (and what is left in
	// it, charged all the same) and starts this one full, on every Envoy
	// version: replacing a bucket directly starts it full on older Envoys
	// and at the old bucket's depleted ratio on newer ones, and an equal
	// bucket would keep its tokens. Its cost is MaxTokens, as any
	// assignment's.
	Fresh bool
}

// LeaseAsk is a lease the driver asks the store for: Store.Lease(key, rule,
// Min, Max, at the call's now), landed with Landed or Failed naming ID.
type LeaseAsk struct {
	ID       uint64
	Min, Max int64
	// TopUp: the lease is asked for streams that spent their assignment
	// of the window in place (Stream.Hungry), among others maybe: it is
	// for what the window has left, first come.
	TopUp bool
}

// Actions is what the driver must do after an event, in this order: give
// back Return (when Return.Credits > 0), send Assign, ask Lease (when
// Lease.ID ≠ 0), and call Tick at Wake (when not zero). Assign is scratch
// of the Bucket, valid until the next call on it.
type Actions struct {
	Return gale.Return
	Assign []Assignment
	Lease  LeaseAsk
	Wake   time.Time
}

// Validate reports whether m can serve.
func (m *Machine) Validate() error {
	switch {
	case m.Limit < 1 || m.Limit > gale.MaxLimit:
		return fmt.Errorf("%w: limit %d outside 1..%d", ErrInvalidMachine, m.Limit, int64(gale.MaxLimit))
	case m.Window < MinWindow:
		return fmt.Errorf("%w: window %v is shorter than %v", ErrInvalidMachine, m.Window, MinWindow)
	case m.Window > gale.MaxPeriod:
		return fmt.Errorf("%w: window %v is longer than %v", ErrInvalidMachine, m.Window, gale.MaxPeriod)
	case m.Guard < 0 || m.Guard > m.Window-time.Second:
		return fmt.Errorf("%w: guard %v outside 0..window−1s", ErrInvalidMachine, m.Guard)
	case m.MaxStreams < 0:
		return fmt.Errorf("%w: max streams %d < 0", ErrInvalidMachine, m.MaxStreams)
	}
	return nil
}

// Report handles a usage report of the bucket from stream s at now:
// allowed and denied requests over elapsed (0 for a subscription's first
// report). The first report on a stream subscribes it. It returns
// ErrInvalidReport for counts or elapsed out of range, ErrTooManyStreams
// past MaxStreams; the bucket is then unchanged. It allocates only when
// the stream is new and the bucket's slice must grow.
func (m *Machine) Report(b *Bucket, now time.Time, s StreamID, allowed, denied uint64, elapsed time.Duration) (Actions, error) {
	return m.ReportFrom(b, now, s, uint64(s), allowed, denied, elapsed)
}

// ReportFrom is Report for a stream of group g (its client connection):
// streams of one group share one share of a window's split. A stream's
// group is the one its first report names.
func (m *Machine) ReportFrom(b *Bucket, now time.Time, s StreamID, g uint64, allowed, denied uint64, elapsed time.Duration) (Actions, error) {
	if allowed > MaxReportCount || denied > MaxReportCount || allowed+denied > MaxReportCount {
		return Actions{}, fmt.Errorf("%w: %d allowed and %d denied: more than %d", ErrInvalidReport, allowed, denied, int64(MaxReportCount))
	}
	if elapsed < 0 {
		return Actions{}, fmt.Errorf("%w: time elapsed %v < 0", ErrInvalidReport, elapsed)
	}
	i := b.find(s)
	if i < 0 {
		if len(b.Streams) >= m.maxStreams() {
			return Actions{}, fmt.Errorf("%w: %d", ErrTooManyStreams, len(b.Streams))
		}
		now = b.clamp(now)
		// A periodic report (elapsed > 0) of a bucket the Envoy had
		// cached: the same Envoy again, when its connection is the left
		// stream's. An immediate one (elapsed 0) is a bucket just made,
		// which holds nothing.
		if j := b.findLeft(g, now); j >= 0 && elapsed > 0 {
			st := b.Left[j]
			b.Left = append(b.Left[:j], b.Left[j+1:]...)
			st.ID, st.Asked = s, 0
			b.Streams = append(b.Streams, st)
		} else {
			// Envoy's immediate report of a bucket's first request
			// (elapsed 0) counts it as its no_assignment_behavior
			// decided it.
			b.Streams = append(b.Streams, Stream{ID: s, Group: g, FailsClosed: elapsed == 0 && allowed == 0 && denied > 0})
		}
		i = len(b.Streams) - 1
	}
	now = b.clamp(now)
	st := &b.Streams[i]
	if elapsed > 0 {
		r := float64(allowed+denied) / elapsed.Seconds()
		if st.Known {
			r = (st.Rate + r) / 2
		}
		st.Rate, st.Known = r, true
		// Denied over an interval (from its previous report: Envoy's
		// time_elapsed is truncated, the receipt is not) that began
		// after its assignment was sent: it spent the assignment, and is
		// topped up from what the window has left. An interval that began
		// earlier holds the denials of what was in force before (a seal,
		// a deny, an expiry under DENY_ALL), which say nothing of this
		// assignment: in a window's steady state only the second report
		// after the window's assignment can top it up (a Guard's slack
		// there let a report 0.25 s before a window's start, which
		// counted the seal's denials, replace a live bucket: 4 of 35
		// windows fell under 0.90 of L in TestRLQSUtilization). A
		// stream's first assignment (its subscription's) may be sent up
		// to a Guard after the interval began, while its lease is asked.
		if denied > 0 && b.current(st, now) && !st.Reported.IsZero() && !st.Reported.Before(st.Assigned) {
			st.Hungry = b.WindowEnd
		}
	}
	st.Reported = now
	var a Actions
	if m.Fault&FaultRefreshTTL != 0 && b.current(st, now) {
		ttl := m.Window.Truncate(time.Second)
		st.Live, st.Expires = now.Add(ttl+m.guard()), now.Add(ttl)
		b.out[0] = Assignment{Stream: s, MaxTokens: st.Share, TokensPerFill: 1, FillInterval: m.fillInterval(), TTL: ttl}
		a.Assign = b.out[:]
	}
	m.next(b, now, &a)
	return a, nil
}

// Leave handles stream s leaving at now (stream closed or reset). Its
// assignment stays charged: the Envoy enforces it until its TTL. Leaving
// a stream the bucket does not know changes nothing.
func (m *Machine) Leave(b *Bucket, now time.Time, s StreamID) Actions {
	now = b.clamp(now)
	var a Actions
	i := b.find(s)
	if i < 0 {
		m.next(b, now, &a)
		return a
	}
	st := b.Streams[i]
	if m.Fault&FaultReassignOnLeave != 0 && b.current(&st, now) && st.Share > 0 {
		b.Sent -= st.Share
		b.Returned += st.Share
		a.Return = gale.Return{Credits: st.Share, WindowEnd: b.WindowEnd, At: now}
	} else {
		b.keepLeft(st, now, m.maxStreams())
	}
	b.Streams = append(b.Streams[:i], b.Streams[i+1:]...)
	m.next(b, now, &a)
	return a
}

// Tick handles time passing to now: a window that has ended starts the
// next window's lease for the streams connected.
func (m *Machine) Tick(b *Bucket, now time.Time) Actions {
	now = b.clamp(now)
	var a Actions
	m.next(b, now, &a)
	return a
}

// Landed lands lease id's grant g at now; sent is when the lease was asked
// (the store's instants are mapped to the sidecar's clock from it, as
// gale.Machine.Landed does). It splits the grant among the streams
// without an assignment in the grant's window, by demand, and gives back
// what is not assigned. A grant of nothing is a refusal: no lease is asked
// before its RetryAfter. A grant of a lease not in flight goes back whole.
func (m *Machine) Landed(b *Bucket, id uint64, sent, now time.Time, g gale.Grant) Actions {
	now = b.clamp(now)
	var a Actions
	if id == 0 || id != b.Lease || g.Granted < 0 {
		if g.Granted > 0 {
			a.Return = gale.Return{Credits: g.Granted, WindowEnd: g.WindowEnd, At: now}
		}
		m.next(b, now, &a)
		return a
	}
	b.Lease, b.Failing = 0, false
	if g.Granted == 0 {
		b.RefusedUntil = later(sent.Add(g.Decision.RetryAfter), now.Add(m.guard()))
		if g.Decision.RetryAfter > 0 {
			b.Spent = sent.Add(g.Decision.RetryAfter)
		}
		m.next(b, now, &a)
		return a
	}
	if g.WindowEnd.IsZero() || g.WindowEnd.Before(b.WindowEnd) {
		// A strategy without windows, or an older window than the one in
		// place: nothing to assign from it.
		a.Return = gale.Return{Credits: g.Granted, WindowEnd: g.WindowEnd, At: now}
		m.next(b, now, &a)
		return a
	}
	until := sent.Add(g.WindowEnd.Sub(g.Now))
	if !g.WindowEnd.Equal(b.WindowEnd) {
		b.WindowEnd, b.Until = g.WindowEnd, until
		b.Leased, b.Sent, b.Returned = 0, 0, 0
	} else if until.Before(b.Until) {
		b.Until = until // the earlier mapping is the safer
	}
	b.Leased += g.Granted
	left := m.assign(b, id, now, g.Granted, &a)
	if left > 0 {
		b.Returned += left
		a.Return = gale.Return{Credits: left, WindowEnd: b.WindowEnd, At: now}
		if a.Assign == nil && !now.Before(b.Until.Add(-m.guard()-time.Second)) {
			// Too late in the window to assign anything: no lease until
			// the store's window has moved on.
			b.RefusedUntil = later(b.Until, now.Add(m.guard()))
		}
	}
	m.next(b, now, &a)
	return a
}

// Failed ends lease id, which the store did not answer; the next Tick or
// report asks again.
func (m *Machine) Failed(b *Bucket, id uint64, now time.Time) Actions {
	now = b.clamp(now)
	if id != 0 && id == b.Lease {
		b.Lease, b.Failing = 0, true
		b.RefusedUntil = now.Add(m.guard()) // not at once: the store is failing
	}
	var a Actions
	m.next(b, now, &a)
	return a
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
