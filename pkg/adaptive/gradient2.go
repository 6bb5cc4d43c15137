package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Gradient2Config configures a Gradient2 controller. Zero fields take the
// documented defaults.
type Gradient2Config struct {
	// MinLimit, MaxLimit and InitialLimit bound and start the limit; 0 means
	// DefaultMinLimit, DefaultMaxLimit and DefaultInitialLimit.
	MinLimit, MaxLimit, InitialLimit int
	// Tolerance is how far the RTT may rise above the no-load RTT before the
	// limit shrinks: gradient = clamp(Tolerance·rttNoload/rtt, 0.25, Tolerance). At
	// least 1; 0 means 1.25.
	Tolerance float64
	// RTTWindow is how many recent OK samples the no-load RTT is the minimum
	// of, so the baseline can drift up after a deploy. 0 means every OK
	// sample since the last recalibration (100 with recalibration off).
	RTTWindow int
	// Smoothing is the weight of each new limit in the estimate's moving
	// average, in (0, 1]. 0 means 0.05. An answer weighs at most
	// 1/(requests in flight when it was admitted): a round trip's
	// answers together move the estimate about 1 − 1/e of the way to
	// their target, however many they are. Weighed 0.05 each, the ~370
	// answers of one round trip past a knee took the estimate from 370 to
	// 20 before the first answer to the cut came back (burst: a saw
	// between start-up and collapse, 2.08× a static limit's time).
	Smoothing float64
	// MinUtilization: a sample admitted with Inflight < limit·MinUtilization
	// carries no "could go higher" information and cannot raise the limit. 0
	// means 1 (only a sample admitted at the limit shows the limit was
	// reached, as TCP grows its window only when the window is what limits
	// it); a negative value disables the guard.
	MinUtilization float64
	// Recalibration is opt-in minRTT recalibration; the zero value is off.
	Recalibration Recalibration
}

// Defaults for Gradient2Config's zero fields.
const (
	DefaultGradient2Tolerance = 1.25
	DefaultRTTWindow          = 100
	DefaultGradient2Smoothing = 0.05
	DefaultMinUtilization     = 1
)

// Gradient2 is the gradient2 control law: it compares each RTT with the
// no-load RTT (see RTTWindow and Recalibration) and moves an estimate
// towards
//
//	newLimit = estimate·gradient + √estimate
//
// by an exponential moving average, its rises paced (see pacing). The
// √estimate headroom probes for capacity quickly at small limits and gently
// at large ones. An Overdue sample applies the smallest gradient (0.25) once
// per congestion event; a loss (Error, Timeout) sets the estimate at once
// to the floor's target from what was in flight when it was admitted, once
// per event (see recovery); Dropped says nothing. Only OK samples feed the
// no-load RTT.
//
// A Gradient2 is not safe for concurrent use; see Controller.
type Gradient2 struct {
	b         bounds
	tolerance float64
	smoothing float64
	minUtil   float64
	estimate  float64 // Invariant: b.min ≤ estimate ≤ b.max
	limit     int     // ⌊estimate⌋, or the pinned limit while recalibrating; Invariant: b.min ≤ limit ≤ b.max
	noload    *minWindow
	recal     recalibrator
	pace      pacing
	losses    recovery
	delays    recovery      // Overdue
	knee      knee          // the most in flight lately answered unloaded (see knee)
	floor     float64       // the knee the last delay found (0: none): see Observe
	after     time.Duration // OverdueAfter's answer, kept by Observe
}

// NewGradient2 returns a Gradient2 controller for c.
func NewGradient2(c Gradient2Config) (*Gradient2, error) {
	const name = "gradient2"
	b, err := resolveBounds(name, c.MinLimit, c.MaxLimit, c.InitialLimit)
	if err != nil {
		return nil, err
	}
	if c.Tolerance == 0 {
		c.Tolerance = DefaultGradient2Tolerance
	}
	if c.Smoothing == 0 {
		c.Smoothing = DefaultGradient2Smoothing
	}
	if c.MinUtilization == 0 {
		c.MinUtilization = DefaultMinUtilization
	}
	if err := checkFrac(name, "Tolerance", c.Tolerance, 1, 100); err != nil {
		return nil, err
	}
	if c.RTTWindow < 0 {
		return nil, fmt.Errorf("adaptive: %s: RTTWindow %d is negative", name, c.RTTWindow)
	}
	if err := checkFrac(name, "Smoothing", c.Smoothing, 1e-9, 1); err != nil {
		return nil, err
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
	return &Gradient2{
		b:         b,
		tolerance: c.Tolerance,
		smoothing: c.Smoothing,
		minUtil:   c.MinUtilization,
		estimate:  float64(b.initial),
		limit:     b.initial,
		noload:    newBatchWindow(c.RTTWindow),
		recal:     r,
		pace:      pacing{initial: b.initial},
	}, nil
}

// Name returns "gradient2".
func (*Gradient2) Name() string { return "gradient2" }

// Limit returns the limit now in force.
func (g *Gradient2) Limit() int { return g.limit }

// OverdueAfter is the RTT above which a sample lowers the estimate, the
// RTT whose gradient is 1 − 1/√estimate, and at least 1.5× the no-load
// RTT: a request in flight longer is a congestion signal already (see
// OverdueReporter). 0 before the first OK sample, and while the estimate
// is 4 or less (the gradient's floor lowers nothing then). The floor, as
// Vegas's: at large estimates the RTT that lowers the estimate is its
// equilibrium's (1.34× the no-load RTT at 200), and the jitter's tail
// passes it; each such request, reported Overdue, was a congestion event
// that held growth for a round trip, and clean-ramp's healthy backend sat
// at 195 in flight, not the 230 its gradient settles at.
func (g *Gradient2) OverdueAfter() time.Duration { return g.after }

// setAfter brings OverdueAfter up to date.
func (g *Gradient2) setAfter() {
	noload, ok := g.noload.min()
	down := 1 - 1/math.Sqrt(g.estimate) // the largest gradient that lowers the estimate
	if !ok || down <= gradientFloor {
		g.after = 0
		return
	}
	g.after = max(time.Duration(g.tolerance*float64(noload)/down), noload*3/2)
}

// Observe folds s in at now and returns the limit now in force.
func (g *Gradient2) Observe(now time.Time, s Sample) int {
	rtt := max(s.RTT, time.Nanosecond) // a zero RTT would divide by zero
	if p := g.recal.step(now, s, rtt, g.noload); p != recalOff {
		g.limit, g.estimate = g.recal.hold(p, g.limit, g.estimate)
		return g.limit
	}
	defer g.setAfter()
	if s.Outcome == Error || s.Outcome == Timeout { // a loss (see recovery)
		if g.losses.newEvent(now, s) {
			// A loss is not noise to smooth: the estimate takes the
			// floor's target at once, from what was in flight when the
			// lost request was admitted.
			m := min(g.estimate, float64(s.Inflight))
			law := min(g.estimate, gradientFloor*m+math.Sqrt(m))
			if s.Outcome == Timeout { // not an error: see knee
				law = max(law, min(g.estimate, float64(g.knee.cutTo(now, s, 0, int(m)))))
			}
			g.estimate = g.b.clampF(law)
			g.limit = g.b.clamp(int(g.estimate))
			g.pace.loss(now, m, g.limit)
		}
		return g.limit
	}
	// OK, and Overdue (a delay past the threshold: the floor's gradient,
	// smoothed as any RTT is, once per congestion event: a backend that
	// stalls makes every request overdue at once); Dropped says nothing of
	// the backend.
	if s.Outcome == Dropped || (s.Outcome == Overdue && !g.delays.newEvent(now, s)) {
		return g.limit
	}
	if s.Outcome == Overdue {
		// The answers admitted before this event may lower the estimate
		// no lower than a knee just below it (see knee).
		g.floor = float64(g.knee.cutTo(now, s, 0, min(int(g.estimate), s.Inflight)))
	}
	gradient := gradientFloor
	if s.Outcome == OK {
		g.noload.push(rtt)
		noload, _ := g.noload.min()
		g.knee.see(s)
		// Capped at Tolerance, not 1: an answer faster than
		// Tolerance·rttNoload weighs against a slow one. Capped at 1, the
		// jitter's fast half could not offset its slow half, and the
		// average gradient sat below the one of the average RTT.
		gradient = min(max(g.tolerance*float64(noload)/float64(rtt), gradientFloor), g.tolerance)
	}
	newLimit := g.estimate*gradient + math.Sqrt(g.estimate)
	// An answer admitted before the last loss was sent into the congestion
	// the loss's cut answered: it lowers the estimate no further (see
	// recovery); before the last delay, no lower than the knee found then
	// (floor). Past a step knee the answers of a round trip admitted one
	// past it each pulled the estimate down a step after the cut, 41 to
	// 29. Below no knee, delays keep smoothing: on a backend that slows
	// from one request in flight (linear), or whose capacity fell, they are
	// the law's brake.
	if s.Outcome == OK && newLimit < g.estimate {
		if !g.losses.mayGrow(s) {
			return g.limit
		}
		if !g.delays.mayGrow(s) {
			newLimit = max(newLimit, min(g.floor, g.estimate))
		}
	}
	if newLimit > g.estimate && (s.Outcome != OK || !g.losses.mayGrow(s) || !g.delays.mayGrow(s) || !utilized(s, g.limit, g.minUtil, g.pace.slow(g.limit))) {
		return g.limit
	}
	// Each answer weighs at most one round trip's share (see Smoothing).
	w := min(g.smoothing, 1/startRound(s))
	next := g.estimate*(1-w) + newLimit*w
	if next > g.estimate {
		next = g.pace.growF(now, s, g.estimate, next)
	}
	g.estimate = g.b.clampF(next)
	g.limit = g.b.clamp(int(g.estimate))
	return g.limit
}

// gradientFloor is the smallest gradient: the most one sample can pull the
// estimate's target down, to gradientFloor·estimate + √estimate.
const gradientFloor = 0.25

// Rebase moves the limit and the estimate to limit (see Rebaser).
func (g *Gradient2) Rebase(limit int) int {
	if to, moved := rebaseTo(g.b, &g.recal, &g.pace, g.limit, limit); moved {
		g.estimate, g.limit = float64(to), to
		g.setAfter()
	}
	return g.limit
}

// Level is the limit it estimates (see Rebaser).
func (g *Gradient2) Level() int { return g.recal.level(g.limit) }
