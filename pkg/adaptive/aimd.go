package adaptive

import (
	"fmt"
	"math"
	"time"
)

// AIMDConfig configures an AIMD controller. Zero fields take the documented
// defaults.
type AIMDConfig struct {
	// MinLimit, MaxLimit and InitialLimit bound and start the limit; 0 means
	// DefaultMinLimit, DefaultMaxLimit and DefaultInitialLimit.
	MinLimit, MaxLimit, InitialLimit int
	// Increase is added to the limit per good sample. 0 means 1.
	Increase int
	// Backoff multiplies the limit on a bad sample, in (0, 1). 0 means 0.95.
	Backoff float64
	// Timeout is the RTT above which even an OK sample is bad. 0 means
	// relative to the no-load RTT: Tolerance × the minimum RTT of the last
	// RTTWindow OK samples, so the threshold fits the backend (an absolute
	// default either never fires before a client's own timeout or fires on
	// every request of a slow backend).
	Timeout time.Duration
	// Tolerance, with Timeout 0, is how far the RTT may rise above the
	// no-load RTT before a sample is bad; at least 1. 0 means 1.7.
	Tolerance float64
	// RTTWindow, with Timeout 0, is how many recent OK samples the no-load
	// RTT is the minimum of. 0 means every OK sample since the last
	// recalibration (DefaultRTTWindow with recalibration off).
	RTTWindow int
	// Recalibration re-measures the no-load RTT, with Timeout 0; on by
	// default (see Recalibration). With an absolute Timeout it must be left
	// zero.
	Recalibration Recalibration
	// MinUtilization: a sample admitted with Inflight < limit·MinUtilization
	// cannot raise the limit. 0 means 1 (see Gradient2Config): AIMD adds
	// to the limit on every good sample, so with a lower guard a backlog
	// draining into a raised limit doubles it every round trip and
	// overshoots the knee by as much; a negative value disables the guard.
	MinUtilization float64
}

// Defaults for AIMDConfig's zero fields.
const (
	DefaultAIMDIncrease  = 1
	DefaultAIMDBackoff   = 0.95
	DefaultAIMDTolerance = 1.7
)

// AIMD is additive increase, multiplicative decrease. A good sample (OK, RTT
// within the threshold, admitted at the limit) adds Increase, paced (see
// pacing): per round trip after the first cut, and before it by a rise
// that doubles each round trip (start-up); below the last cut's limit,
// per sample (slow start). A
// slow one (RTT above the threshold, or Overdue) multiplies the limit by
// Backoff, down to 0.5 the further past the threshold, and a loss (Error,
// Timeout) halves what was in flight when it was admitted; each once per
// congestion event (see recovery). Dropped says nothing. The threshold is
// Timeout, or, by default, Tolerance × the no-load RTT (see RTTWindow and
// Recalibration).
//
// An AIMD is not safe for concurrent use; see Controller.
type AIMD struct {
	b        bounds
	increase int
	backoff  float64
	timeout  time.Duration // 0: relative to noload
	after    time.Duration // the threshold in force: timeout, or tol × noload (0 before the first OK sample)
	tol      float64
	noload   *minWindow // nil with an absolute timeout
	recal    recalibrator
	minUtil  float64
	limit    int // Invariant: b.min ≤ limit ≤ b.max
	pace     pacing
	losses   recovery // Error and Timeout
	delays   recovery // Overdue
	knee     knee     // the most in flight lately answered unloaded (see knee)
}

// NewAIMD returns an AIMD controller for c.
func NewAIMD(c AIMDConfig) (*AIMD, error) {
	const name = "aimd"
	b, err := resolveBounds(name, c.MinLimit, c.MaxLimit, c.InitialLimit)
	if err != nil {
		return nil, err
	}
	if c.Increase == 0 {
		c.Increase = DefaultAIMDIncrease
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultAIMDBackoff
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultAIMDTolerance
	}
	if c.MinUtilization == 0 {
		c.MinUtilization = DefaultMinUtilization
	}
	switch {
	case c.Increase < 0:
		return nil, fmt.Errorf("adaptive: %s: Increase %d is negative", name, c.Increase)
	case c.Timeout < 0:
		return nil, fmt.Errorf("adaptive: %s: Timeout %v is negative", name, c.Timeout)
	case c.RTTWindow < 0:
		return nil, fmt.Errorf("adaptive: %s: RTTWindow %d is negative", name, c.RTTWindow)
	case !(c.Backoff > 0 && c.Backoff < 1):
		return nil, fmt.Errorf("adaptive: %s: Backoff %v outside (0, 1)", name, c.Backoff)
	}
	if err := checkFrac(name, "MinUtilization", c.MinUtilization, math.Inf(-1), 1); err != nil {
		return nil, err
	}
	if err := checkFrac(name, "Tolerance", c.Tolerance, 1, 100); err != nil {
		return nil, err
	}
	a := &AIMD{b: b, increase: c.Increase, backoff: c.Backoff, timeout: c.Timeout, after: c.Timeout, tol: c.Tolerance, minUtil: c.MinUtilization, limit: b.initial, pace: pacing{initial: b.initial}}
	if c.Timeout > 0 {
		if c.Recalibration != (Recalibration{}) {
			return nil, fmt.Errorf("adaptive: %s: Recalibration re-measures the no-load RTT, which an absolute Timeout does not use: drop one", name)
		}
		return a, nil
	}
	if a.recal, err = newRecalibrator(name, c.Recalibration, b); err != nil {
		return nil, err
	}
	if c.RTTWindow == 0 && !a.recal.on() {
		c.RTTWindow = DefaultRTTWindow
	}
	a.noload = newBatchWindow(c.RTTWindow)
	return a, nil
}

// setAfter brings the relative threshold up to date.
func (a *AIMD) setAfter() {
	if noload, ok := a.noload.min(); ok {
		a.after = time.Duration(a.tol * float64(noload))
	}
}

// OverdueAfter is the threshold: a request in flight longer is bad
// already (see OverdueReporter); 0 before the first OK sample when
// relative.
func (a *AIMD) OverdueAfter() time.Duration { return a.after }

// Name returns "aimd".
func (*AIMD) Name() string { return "aimd" }

// Limit returns the limit now in force.
func (a *AIMD) Limit() int { return a.limit }

// Observe folds s in and returns the limit now in force. AIMD ignores now.
func (a *AIMD) Observe(now time.Time, s Sample) int {
	if a.noload != nil {
		if p := a.recal.step(now, s, s.RTT, a.noload); p != recalOff {
			a.limit, _ = a.recal.hold(p, a.limit, float64(a.limit))
			if p == recalEnd {
				a.setAfter()
			}
			return a.limit
		}
		if s.Outcome == OK {
			a.noload.push(s.RTT)
			a.setAfter()
			a.knee.see(s)
		}
	}
	switch {
	case s.Outcome == Error || s.Outcome == Timeout: // a loss (see recovery)
		if a.losses.newEvent(now, s) {
			m := min(a.limit, s.Inflight)
			law := m / 2
			if s.Outcome == Timeout { // not an error: see knee
				law = a.knee.cutTo(now, s, law, m)
			}
			a.limit = a.b.clamp(law)
			a.pace.loss(now, float64(m), a.limit)
		}
	case s.Outcome == Overdue: // past the threshold already: once per congestion event
		if a.delays.newEvent(now, s) {
			m := min(a.limit, s.Inflight)
			a.limit = a.b.clamp(a.knee.cutTo(now, s, int(float64(m)*a.backoff), m))
			a.pace.cut(a.limit)
		}
	case s.Outcome == Dropped: // says nothing of the backend
	case a.after > 0 && s.RTT > a.after: // slow: once per congestion event
		if a.delays.newEvent(now, s) {
			// The further past the threshold, the deeper the cut: ×Backoff
			// just past it, down to ×0.5 at twice it.
			f := min(a.backoff, max(0.5, float64(a.after)/float64(s.RTT)))
			a.limit = a.b.clamp(a.knee.cutTo(now, s, int(float64(a.limit)*f), min(a.limit, s.Inflight)))
			a.pace.cut(a.limit)
		}
	case a.losses.mayGrow(s) && a.delays.mayGrow(s) && utilized(s, a.limit, a.minUtil, a.pace.slow(a.limit)):
		a.limit = a.b.clamp(a.pace.grow(now, s, a.limit, a.increase))
	}
	return a.limit
}

// Rebase moves the limit to limit (see Rebaser).
func (a *AIMD) Rebase(limit int) int {
	a.limit, _ = rebaseTo(a.b, &a.recal, &a.pace, a.limit, limit)
	return a.limit
}

// Level is the limit it estimates (see Rebaser).
func (a *AIMD) Level() int { return a.recal.level(a.limit) }
