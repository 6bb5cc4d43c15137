package adaptive

import (
	"fmt"
	"math"
	"time"
)

// VegasConfig configures a Vegas controller. Zero fields take the documented
// defaults.
type VegasConfig struct {
	// MinLimit, MaxLimit and InitialLimit bound and start the limit; 0 means
	// DefaultMinLimit, DefaultMaxLimit and DefaultInitialLimit.
	MinLimit, MaxLimit, InitialLimit int
	// RTTWindow is how many recent OK samples the no-load RTT is the minimum
	// of. 0 means every OK sample since the last recalibration
	// (DefaultRTTWindow with recalibration off).
	RTTWindow int
	// MinUtilization: a sample admitted with Inflight < limit·MinUtilization
	// cannot raise the limit. 0 means 1 (see Gradient2Config); a negative
	// value disables the guard.
	MinUtilization float64
	// Recalibration is opt-in minRTT recalibration; the zero value is off.
	Recalibration Recalibration
}

// Vegas is the TCP Vegas law as Netflix's concurrency-limits applies it. At
// each OK sample it estimates the requests queued at the backend,
//
//	queue = limit·(1 − rttNoload/rttRound)
//
// rttRound the fastest answer of the round trip so far and the one before
// (a round trip is a no-load RTT long), as Linux's tcp_vegas judges each
// round trip by its least RTT: a slow answer among fast ones is the
// latency's tail, not a queue, and judging each sample by its own RTT kept
// the limit where the tail, not the queue, reached beta (75-80% of the
// capacity on load-step's overload).
//
// and with step = max(1, ⌊log10(limit)⌋), alpha = max(1, 3·log10(limit),
// limit/5) and beta = max(1, 6·log10(limit), 0.3·limit): queue < alpha
// raises the limit by step (if
// the sample was admitted at the limit; paced, see pacing), queue > beta or
// an Overdue sample lowers it by step, once per congestion event, and
// anything between holds. A loss (Error, Timeout) halves what was in flight
// when it was admitted, once per event (see recovery); Dropped says
// nothing. Only OK samples feed the no-load RTT (see RTTWindow and
// Recalibration).
//
// The proportional terms of alpha and beta (above a limit of about 20 and
// 27) hold the limit where the round trip's least RTT is between 1.25×
// (gradient2's default tolerance) and 1.43× the no-load RTT. Netflix's
// logarithmic alpha and beta alone call a 3.6% RTT rise a queue at a limit
// of 200, inside the gap between a round trip's least RTT and the least
// of every answer since the last recalibration (4% with 5% jitter), and
// below the rise of a backend that serves requests concurrently and slows
// before it saturates: vegas held clean-ramp's backend, which has room
// for 300, at 140 in flight (64% of a static 300's throughput).
//
// A Vegas is not safe for concurrent use; see Controller.
type Vegas struct {
	b       bounds
	recent  roundMin // this round trip's least RTT (and the last one's)
	minUtil float64
	limit   int // Invariant: b.min ≤ limit ≤ b.max
	noload  *minWindow
	typical *minWindow // OverdueAfter's floor's baseline (see OverdueAfter)
	recal   recalibrator
	pace    pacing
	knee    knee          // the most in flight lately answered unloaded (see knee)
	losses  recovery      // Error and Timeout
	delays  recovery      // Overdue
	after   time.Duration // OverdueAfter's answer, kept by Observe
	// afterFor is what after was computed from.
	afterFor struct {
		limit           int
		noload, typical time.Duration
	}
}

// NewVegas returns a Vegas controller for c.
func NewVegas(c VegasConfig) (*Vegas, error) {
	const name = "vegas"
	b, err := resolveBounds(name, c.MinLimit, c.MaxLimit, c.InitialLimit)
	if err != nil {
		return nil, err
	}
	if c.MinUtilization == 0 {
		c.MinUtilization = DefaultMinUtilization
	}
	if c.RTTWindow < 0 {
		return nil, fmt.Errorf("adaptive: %s: RTTWindow %d is negative", name, c.RTTWindow)
	}
	if err := checkFrac(name, "MinUtilization", c.MinUtilization, math.Inf(-1), 1); err != nil {
		return nil, err
	}
	r, err := newRecalibrator(name, c.Recalibration, b)
	if err != nil {
		return nil, err
	}
	if c.RTTWindow == 0 && !r.on() {
		c.RTTWindow = DefaultRTTWindow
	}
	return &Vegas{b: b, minUtil: c.MinUtilization, limit: b.initial, noload: newMinWindow(c.RTTWindow), typical: newBatchWindow(c.RTTWindow), recal: r, pace: pacing{initial: b.initial}}, nil
}

// Name returns "vegas".
func (*Vegas) Name() string { return "vegas" }

// Limit returns the limit now in force.
func (v *Vegas) Limit() int { return v.limit }

// OverdueAfter is the RTT above which a sample's queue estimate passes
// beta and lowers the limit, and at least 1.5× a typical unloaded answer:
// a request in flight longer is a congestion signal already (see
// OverdueReporter). 0 before the first OK sample, and while the limit is
// at most beta (no RTT lowers it then). The floor: at large limits beta's
// RTT comes within the jitter of the no-load RTT, and one request that
// slow is the tail, which the law itself does not cut for. The typical
// answer is the least median of batches of 20 (see newBatchWindow), the
// recalibration's median once there is one: one request is judged against
// one answer, not against the least of thousands, which sinks to 0.84×
// the median before the first recalibration, and brought the floor inside
// the jitter of 150 in flight on clean-ramp (an Overdue, and a cut, every
// round trip).
func (v *Vegas) OverdueAfter() time.Duration { return v.after }

// setAfter brings OverdueAfter up to date (computed again only when the
// limit, the no-load RTT or the typical answer has moved).
func (v *Vegas) setAfter() {
	noload, ok := v.noload.min()
	typical, _ := v.typical.min()
	if v.limit == v.afterFor.limit && noload == v.afterFor.noload && typical == v.afterFor.typical {
		return
	}
	v.afterFor.limit, v.afterFor.noload, v.afterFor.typical = v.limit, noload, typical
	l := float64(v.limit)
	_, beta := vegasBand(l)
	if !ok || beta >= l {
		v.after = 0
		return
	}
	v.after = max(time.Duration(float64(noload)/(1-beta/l)), typical*3/2)
}

// Observe folds s in at now and returns the limit now in force.
func (v *Vegas) Observe(now time.Time, s Sample) int {
	rtt := max(s.RTT, time.Nanosecond) // a zero RTT would divide by zero
	if p := v.recal.step(now, s, rtt, v.noload); p != recalOff {
		switch p { // the typical answer is re-measured with the no-load RTT
		case recalBegin:
			v.typical.reset()
		case recalEnd:
			nl, _ := v.noload.min()
			v.typical.fix(nl)
		}
		v.limit, _ = v.recal.hold(p, v.limit, float64(v.limit))
		return v.limit
	}
	defer v.setAfter()
	l := float64(v.limit)
	lg := math.Log10(l)
	step := max(1, int(lg))
	switch s.Outcome {
	case Error, Timeout: // a loss (see recovery): halve what was in flight
		if v.losses.newEvent(now, s) {
			m := min(v.limit, s.Inflight)
			law := m / 2
			if s.Outcome == Timeout { // not an error: see knee
				law = v.knee.cutTo(now, s, law, m)
			}
			v.limit = v.b.clamp(law)
			v.pace.loss(now, float64(m), v.limit)
		}
		return v.limit
	case Overdue: // past beta already: once per congestion event
		if v.delays.newEvent(now, s) {
			v.limit = v.b.clamp(v.knee.cutTo(now, s, v.limit-step, min(v.limit, s.Inflight)))
			v.pace.cut(v.limit)
		}
		return v.limit
	case Dropped: // says nothing of the backend
		return v.limit
	}
	v.noload.push(rtt)
	v.typical.push(rtt)
	v.knee.see(s)
	noload, _ := v.noload.min()
	queue := l * (1 - float64(noload)/float64(v.recent.push(now, rtt, noload)))
	alpha, beta := vegasBand(l)
	switch {
	case queue < alpha:
		if v.losses.mayGrow(s) && v.delays.mayGrow(s) && utilized(s, v.limit, v.minUtil, v.pace.slow(v.limit)) {
			v.limit = v.b.clamp(v.pace.grow(now, s, v.limit, step))
		}
	case queue > beta && v.delays.newEvent(now, s): // once per congestion event
		v.limit = v.b.clamp(v.knee.cutTo(now, s, v.limit-step, min(v.limit, s.Inflight)))
		v.pace.cut(v.limit)
	}
	return v.limit
}

// roundMin is the least RTT of the current round trip and the one before
// it, a round trip being round long (the no-load RTT) from its first
// sample; a round trip ended two or more ago is forgotten.
type roundMin struct {
	start     time.Time     // when the current round trip began
	prev, cur time.Duration // their least RTTs; 0: none
}

// push adds rtt, seen at now, and returns the least RTT of this round trip
// and the one before.
func (r *roundMin) push(now time.Time, rtt, round time.Duration) time.Duration {
	switch age := now.Sub(r.start); {
	case r.cur == 0 || age >= 2*round:
		r.prev, r.cur, r.start = 0, rtt, now
	case age >= round:
		r.prev, r.cur, r.start = r.cur, rtt, now
	default:
		r.cur = min(r.cur, rtt)
	}
	if r.prev > 0 {
		return min(r.prev, r.cur)
	}
	return r.cur
}

// vegasBand returns alpha and beta for a limit l (see Vegas).
func vegasBand(l float64) (alpha, beta float64) {
	lg := math.Log10(l)
	return max(1, 3*lg, l/5), max(1, 6*lg, l*3/10)
}

// Rebase moves the limit to limit (see Rebaser).
func (v *Vegas) Rebase(limit int) int {
	if to, moved := rebaseTo(v.b, &v.recal, &v.pace, v.limit, limit); moved {
		v.limit = to
		v.setAfter()
	}
	return v.limit
}

// Level is the limit it estimates (see Rebaser).
func (v *Vegas) Level() int { return v.recal.level(v.limit) }
