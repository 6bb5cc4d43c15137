// Package adaptive caps the requests in flight to a backend at a ceiling it
// infers from their latency, rather than at a hand-tuned constant.
//
// Two parts compose. A Controller is a pure control law: it folds completed
// requests (Samples) into a concurrency limit. It starts no goroutine, reads no
// clock and does no I/O; time is the now passed to Observe. Four are provided:
// Gradient2 (latency gradient against a rolling no-load RTT), AIMD (additive
// increase, multiplicative decrease), P95 (a latency target on a windowed p95 or
// EWMA, evaluated every tick) and Vegas (estimated queue length against
// log10-scaled thresholds). Gradient2, Vegas and AIMD re-measure the
// no-load RTT by Envoy-style minRTT recalibration, by default every 15 s.
//
// A Gate is the thin concurrent wrapper around one Controller: it admits a
// request while fewer than the current limit are in flight, optionally queues
// the rest (FIFO or LIFO, bounded in length and in wait), and hands back a
// Lease whose Release records the request's Sample and frees its slot for the
// next waiter. Every limit adjustment happens on that release path, or when
// an admission or rejection finds a request in flight overdue (see
// OverdueReporter); there is no background timer. A Gate is safe for
// concurrent use; Controllers are not and must each belong to one Gate.
//
// The caller stamps time once per request at the edge and passes it down, as
// golang.org/x/time/rate does; tests drive everything on a fixed timeline and
// a clock.Fake.
package adaptive

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Outcome is how a request ended. Controllers read it as a congestion signal
// alongside the RTT.
type Outcome uint8

const (
	// OK is a response from the backend that says nothing about overload.
	OK Outcome = iota
	// Error is a response that signals trouble, e.g. an HTTP 5xx.
	Error
	// Timeout is a request that ran out of time waiting for the backend.
	Timeout
	// Dropped is a request whose stream ended before any response (the client
	// went away). Its RTT says nothing about service time.
	Dropped
	// Overdue is a request still in flight whose RTT so far is past its
	// controller's threshold (see OverdueReporter): only a Gate reports it,
	// once, before the request's own release. Its RTT is a lower bound.
	Overdue
)

// String returns "ok", "error", "timeout", "dropped" or "overdue".
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Error:
		return "error"
	case Timeout:
		return "timeout"
	case Dropped:
		return "dropped"
	case Overdue:
		return "overdue"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// failed reports whether o counts against the backend's error rate: Error,
// Timeout and Overdue do; OK and Dropped do not.
func (o Outcome) failed() bool { return o == Error || o == Timeout || o == Overdue }

// Sample is one completed request, as a Gate reports it to its Controller.
type Sample struct {
	Start    time.Time     // when the request was admitted
	RTT      time.Duration // admission to response (or to the drop); ≥ 0
	Inflight int           // requests in flight when it was admitted, itself included
	// Limit is the limit in force when it was admitted; 0 when unknown.
	Limit int
	// Ceiling is the ceiling below Limit it was admitted under (a
	// distributed node's share, see Gate.TryAcquireBelow; Inflight is then
	// scaled to Limit); 0 when none.
	Ceiling int
	// Load is the backend's load as a distributed node can infer it: its in
	// flight as a fraction of its share, applied to the fleet's ceiling
	// L_global (Gate.TryAcquireShare); 0 when not a node's, or its share is
	// not below its limit. For a growth check that a node above L_global
	// should not pass on a load the backend never carried. Start-up's
	// bound reads it (the most in flight ever answered: see pacing); the
	// growth check does not: judging it by Load cost a live fleet of
	// gradient2 half its goodput (docs/fleet-gates.md).
	Load    int
	Outcome Outcome
}

// Controller infers a concurrency limit from completed requests.
//
// Implementations are pure: no goroutines, no clock reads, no I/O. They are
// not safe for concurrent use; the Gate that owns one serialises every call,
// so a Controller must not be shared between Gates. Limit and Observe always
// return a value in [MinLimit, MaxLimit] of the controller's config, and
// MinLimit is at least 1 (a Gate treats an answer below 1 as 1).
type Controller interface {
	// Observe folds s in at now and returns the limit now in force.
	Observe(now time.Time, s Sample) int
	// Limit returns the limit now in force.
	Limit() int
	// Name names the control law: "gradient2", "aimd", "p95" or "vegas".
	Name() string
}

// OverdueReporter is implemented by a Controller that can tell a request
// is a congestion signal before it ends: one still in flight after
// OverdueAfter has taken longer than the controller's law lets a request
// take at the limit now in force without lowering it. A Gate reports such
// a request to Observe as soon as it sees the time pass (on its next
// admission, rejection or release), as a Sample with Outcome Overdue and
// the RTT so far, once; its eventual release is reported as usual. A
// backend that drops requests, or stalls, is seen at the controller's
// threshold, not at the client's timeout. Controllers take an Overdue as a
// loss (see recovery). 0 means none (no RTT measured
// yet, or none would lower the limit). It is called on every admission, so
// it only reads a field that Observe keeps up to date.
type OverdueReporter interface {
	OverdueAfter() time.Duration
}

var (
	_ OverdueReporter = (*Gradient2)(nil)
	_ OverdueReporter = (*AIMD)(nil)
	_ OverdueReporter = (*P95)(nil)
	_ OverdueReporter = (*Vegas)(nil)
)

var (
	_ Controller = (*Gradient2)(nil)
	_ Controller = (*AIMD)(nil)
	_ Controller = (*P95)(nil)
	_ Controller = (*Vegas)(nil)
)

var (
	// ErrQueueFull is returned by Gate.Acquire when the gate is at its limit
	// and its queue already holds MaxQueue waiters.
	ErrQueueFull = errors.New("adaptive: queue full")
	// ErrQueueTimeout is returned by Gate.Acquire when a request waited
	// QueueTimeout in the queue without being admitted. Such a request is
	// never admitted afterwards.
	ErrQueueTimeout = errors.New("adaptive: timed out in queue")
	// ErrLimit is returned by Gate.Acquire when the gate is at its limit and
	// has no queue (MaxQueue is 0).
	ErrLimit = errors.New("adaptive: concurrency limit reached")
)

// Defaults shared by every controller config's zero fields.
const (
	DefaultMinLimit     = 1
	DefaultMaxLimit     = 1000
	DefaultInitialLimit = 10 // clamped into [MinLimit, MaxLimit]; start-up raises it by 1, 2, 4 … per round trip (see pacing)
)

// recovery is how every controller takes losses (Error, Timeout and
// Overdue samples; Dropped says nothing of the backend), as TCP's fast
// recovery does:
//
//   - A loss is evidence that the backend cannot take what was in flight
//     when the lost request was admitted: the first loss of a congestion
//     event cuts the limit from min(limit, s.Inflight), not from a limit
//     that may stand far above what was ever tried (a limit that rose while
//     the backend looked healthy).
//   - A request admitted before the last cut was sent into the congestion
//     that cut answered: its loss does not cut again, and its success does
//     not raise the limit. Without the first, a burst of losses (every
//     request a dropping backend held, reported together) cuts once per
//     request, to MinLimit; without the second, the requests still
//     succeeding from before the cut undo it.
type recovery struct{ cut time.Time }

// newEvent reports whether s, a loss observed at now, starts a congestion
// event, and if so records the cut.
func (r *recovery) newEvent(now time.Time, s Sample) bool {
	if s.Start.Before(r.cut) {
		return false
	}
	r.cut = now
	return true
}

// mayGrow reports whether s may raise the limit: it was admitted after the
// last cut.
func (r *recovery) mayGrow(s Sample) bool { return !s.Start.Before(r.cut) }

// pacing paces a limit's additive increases as TCP paces its window. Until
// the first cut (start-up) the rise per round trip doubles: step, then 2,
// 4, 8 … steps above the initial limit (10 → 11 → 13 → 17 → 25 → 41),
// never more than doubling the limit, spread over the round trip's
// answers (as TCP grows per ACK: a request never answered earns nothing),
// and never more than one round trip's rise past the most in flight ever
// answered (startNext of proven). After the first cut, above the limit
// the cut left (the threshold), it is step/limit per sample: one step per
// round trip (congestion avoidance; under a ceiling, a distributed node's
// share, a round trip brings the share's worth of answers: step/share).
// Below the threshold — regaining what a pin or a later, deeper cut
// took — it is the whole step per sample (slow start, doubling per round
// trip). Without it a controller adding a
// step per sample probes past a hard cap (a concurrency or rate limit)
// every few round trips, and each probe costs a failed request.
//
// Start-up is not TCP's slow start, which doubles the window per round
// trip from a few packets: a limit starts at a level a backend may already
// be at (the default initial limit, 10, is a small backend's whole
// capacity), and doubling from there sends a whole limit's worth past
// such a cap in the round trip before the first of them can be missed
// (20 in flight against a cap of 10, 10 requests lost). Growing the rise
// instead costs a few round trips more to a large limit (10 to 1,000 in
// 10 round trips rather than 7) and at a cap at the initial limit loses
// one request, then two, before the loss is seen.
//
// A loss also leaves a ceiling on growth, CUBIC's window curve (RFC 9438):
//
//	W(t) = Wmax + C·(t − K)³,  K = ∛(Wmax·½ / C)
//
// t seconds after the loss, Wmax the level that lost (min(limit, in
// flight) when the lost request was admitted) and C lossCubicC. It starts
// at half of Wmax, rises fast, flattens into a plateau at Wmax K seconds
// on (2.3 s for Wmax 10, 5 s for 100), and past it grows slowly, then
// fast. A hard cap — a backend that drops or defers above a concurrency
// or a rate — does not move, and each probe past it costs failed requests:
// with the ceiling it is probed every few seconds rather than every few
// round trips (a third to a tenth of the failures once settled on
// drop-cap, defer-cap and rate-cap). Delay cuts leave no ceiling: a
// backend that slows down is not a cap, and its limit should come back as
// fast as its latency does. The ceiling is in seconds, not round trips, as
// CUBIC's is, so a backend answering in 5 ms is not probed ten times as
// often as one answering in 50.
type pacing struct {
	initial   int     // the limit it started from: start-up's base
	proven    int     // start-up: the most in flight an OK sample was admitted with
	threshold int     // the limit the last cut left; 0 before any
	credit    float64 // fractional steps earned in start-up and congestion avoidance
	// lossMax, lossK and lossAt are the last loss's Wmax, its K in
	// seconds, and when it was seen; lossMax 0 before any loss.
	lossMax, lossK float64
	lossAt         time.Time
}

// lossCubicC is pacing's C, in limit units per second cubed: CUBIC's 0.4.
const lossCubicC = 0.4

// loss records a loss seen at now when from were in flight (see pacing),
// which cut the limit to limit (see cut).
func (p *pacing) loss(now time.Time, from float64, limit int) {
	p.lossMax, p.lossAt = from, now
	p.lossK = math.Cbrt(from * 0.5 / lossCubicC)
	p.cut(limit)
}

// ceiling returns the most the limit may grow to at now: +Inf before any
// loss.
func (p *pacing) ceiling(now time.Time) float64 {
	if p.lossMax == 0 {
		return math.Inf(1)
	}
	d := now.Sub(p.lossAt).Seconds() - p.lossK
	return p.lossMax + lossCubicC*d*d*d
}

// slow reports whether limit is in start-up or slow start: judged against
// the limit each sample was admitted under (see utilized).
func (p *pacing) slow(limit int) bool { return p.threshold == 0 || limit < p.threshold }

// cut records that the limit was cut to limit.
func (p *pacing) cut(limit int) { p.threshold, p.credit = limit, 0 }

// grow returns limit raised for one OK sample s seen at now that may raise
// it by step, never above the ceiling (nor below limit).
func (p *pacing) grow(now time.Time, s Sample, limit, step int) int {
	c := math.MaxInt
	if p.lossMax > 0 {
		c = max(limit, int(min(p.ceiling(now), math.MaxInt32)))
	}
	switch {
	case p.threshold == 0:
		pr, st := float64(p.startProve(s)), float64(step)
		p.credit += (p.startNext(pr, st) - pr) / startRound(s)
		c = min(c, max(limit, int(p.startNext(pr, st))))
	case limit < p.threshold:
		return min(limit+step, c)
	default:
		p.credit += float64(step) / answersPerRound(s, float64(limit))
	}
	n := int(p.credit + 1e-9) // a round trip's fractions may sum to just under a step
	if n < 1 {
		return limit
	}
	p.credit -= float64(n)
	return min(limit+n, c)
}

// growF is grow for a continuous estimate: the rise from cur to next for
// one OK sample s, at most start-up's (see startNext) before the first cut
// and 1/cur (a step per round trip) in congestion avoidance, and never
// above the ceiling at now (nor below cur).
func (p *pacing) growF(now time.Time, s Sample, cur, next float64) float64 {
	c := max(cur, p.ceiling(now))
	switch {
	case p.threshold == 0:
		pr := float64(p.startProve(s))
		return min(next, cur+(p.startNext(pr, 1)-pr)/startRound(s), max(cur, p.startNext(pr, 1)), c)
	case cur < float64(p.threshold):
		return min(next, c)
	}
	return min(next, cur+1/answersPerRound(s, cur), c)
}

// answersPerRound is how many answers a round trip brings a saturated gate
// at limit: the limit, or under a ceiling below it (a distributed node's
// share) the ceiling. Congestion avoidance spreads its step per round trip
// over them: a node admitting under a share of L_global/N gets a round
// trip's worth of answers from its share, and dividing its step by its
// limit instead grew it, and the fleet's mean with it, N times slower
// than one sidecar (TestCongestionAvoidanceUnderAShare).
func answersPerRound(s Sample, limit float64) float64 {
	if s.Ceiling > 0 && float64(s.Ceiling) < limit {
		return float64(s.Ceiling)
	}
	return max(limit, 1)
}

// startProve records s, an OK sample in start-up, and returns the most
// in flight an OK sample has been admitted with.
func (p *pacing) startProve(s Sample) int {
	in := s.Inflight
	if s.Load > 0 {
		// A distributed node's Inflight is scaled to its own limit: at a
		// full share it says the limit was in flight, whatever the backend
		// carried, and start-up doubled on it every round trip with no
		// bound (four vegas sidecars rose to an L_global of 96 on a knee
		// of 40 before the first cut). Load is what the backend carried.
		in = min(in, s.Load)
	}
	p.proven = max(p.proven, in)
	return p.proven
}

// startRound is how many answers a round trip brings a gate saturated as
// s found it: the requests in flight when s was admitted (under a
// ceiling, a distributed node's share, the ceiling: Inflight is scaled).
// Start-up spreads a round trip's rise over them, as TCP's slow start
// grows per ACK: a request never answered (a drop) earns nothing.
func startRound(s Sample) float64 {
	if s.Ceiling > 0 {
		return float64(s.Ceiling)
	}
	return float64(max(1, s.Inflight))
}

// startNext is start-up's level one round trip after l: l plus step times
// its rise since the initial limit, plus one, and at most 2l (see pacing).
func (p *pacing) startNext(l, step float64) float64 {
	return l + min(l, step*max(1, l-float64(p.initial)+1))
}

// bounds is a validated [min, max] range and a starting limit inside it.
type bounds struct{ min, max, initial int }

// resolveBounds applies the defaults to a config's MinLimit, MaxLimit and
// InitialLimit and checks them; name prefixes the errors.
func resolveBounds(name string, minL, maxL, initial int) (bounds, error) {
	if minL < 0 || maxL < 0 || initial < 0 {
		return bounds{}, fmt.Errorf("adaptive: %s: MinLimit %d, MaxLimit %d, InitialLimit %d: limits must not be negative (0 means the default)", name, minL, maxL, initial)
	}
	b := bounds{min: minL, max: maxL, initial: initial}
	if b.min == 0 {
		b.min = DefaultMinLimit
	}
	if b.max == 0 {
		b.max = max(DefaultMaxLimit, b.min)
	}
	if b.min > b.max {
		return bounds{}, fmt.Errorf("adaptive: %s: MinLimit %d above MaxLimit %d: lower MinLimit or raise MaxLimit", name, b.min, b.max)
	}
	if b.initial == 0 {
		b.initial = min(max(DefaultInitialLimit, b.min), b.max)
	}
	if b.initial < b.min || b.initial > b.max {
		return bounds{}, fmt.Errorf("adaptive: %s: InitialLimit %d outside [MinLimit %d, MaxLimit %d]: set it inside the range or to 0", name, b.initial, b.min, b.max)
	}
	return b, nil
}

// clamp returns v limited to [b.min, b.max].
func (b bounds) clamp(v int) int { return min(max(v, b.min), b.max) }

// clampF is clamp for a float estimate.
func (b bounds) clampF(v float64) float64 {
	return min(max(v, float64(b.min)), float64(b.max))
}

// utilized reports whether sample s was admitted close enough to the limit
// to say the limit could go higher: s.Inflight ≥ that limit·frac. A
// negative frac disables the guard. In start-up and slow start the limit
// is the one s was admitted under (s.Limit, when known), as TCP judges a
// segment window-limited when it is sent, so every answer of a saturated
// gate's round trip counts; in congestion avoidance it is the
// limit now, so after a rise the samples admitted before it no longer
// count, and a saturated gate grows by about one step per round trip.
func utilized(s Sample, limit int, frac float64, slowStart bool) bool {
	if slowStart && s.Limit > 0 {
		limit = s.Limit
	}
	return frac < 0 || float64(s.Inflight) >= float64(limit)*frac
}

// checkFrac validates a fraction parameter that must lie in [lo, hi].
func checkFrac(ctrl, field string, v, lo, hi float64) error {
	if v != v || v < lo || v > hi {
		return fmt.Errorf("adaptive: %s: %s %v outside [%v, %v]", ctrl, field, v, lo, hi)
	}
	return nil
}

// Rebaser is implemented by a Controller whose limit its owner may move:
// a distributed node keeps its L_local within a band about the fleet's
// ceiling (distributed.Node), so that every node's limit counts in the
// same units. Rebase moves the limit to limit, clamped to the controller's
// bounds, keeping what it has learned of the backend (the no-load RTT, the
// knee) and where its growth stands (start-up, congestion avoidance): a
// move by the owner is not a congestion signal. While a recalibration pins
// the limit, it moves only the level the recalibration restores.
// Rebase returns the limit now in force. Level is the limit the
// controller estimates: the limit, or while a recalibration pins it, the
// level the recalibration will restore (a node reports Level to its
// fleet: a pin is a measurement, not an estimate of the backend). Like
// Observe, both are called by the Gate that owns the controller, never
// concurrently.
type Rebaser interface {
	Rebase(limit int) int
	Level() int
}

// shift moves the pacing's levels by d, for a limit its owner moved by d
// (Rebaser): the threshold and the loss curve stand where they stood
// relative to the limit. Left where they were, a limit raised past a
// loss's plateau could not grow for seconds, and one lowered under the
// threshold would double back up at once.
func (p *pacing) shift(d int) {
	if p.threshold > 0 {
		p.threshold = max(1, p.threshold+d)
	}
	if p.lossMax > 0 {
		p.lossMax = max(1, p.lossMax+float64(d))
	}
}
