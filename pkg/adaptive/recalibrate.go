package adaptive

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Recalibration configures Envoy-style minRTT recalibration for Gradient2,
// Vegas and AIMD (with a relative threshold). Every Interval (± Jitter) of
// the now passed to Observe, the controller pins its limit to a low value
// so queues drain, re-measures the no-load RTT from RequestCount samples of
// requests admitted under the pin, then restores the limit it had before.
// It is on by default: the zero value recalibrates every 15 s. Without it
// a no-load RTT measured only under load (a minimum over recent samples, all
// queued) drifts up with the load, and the controller settles above the
// backend's knee.
//
// While pinned, samples of requests admitted before the pin and samples
// that are not OK are ignored; if no OK sample ever arrives the limit stays
// pinned.
type Recalibration struct {
	// Interval is the time between recalibrations. 0 means 15s; a negative
	// value disables recalibration.
	Interval time.Duration
	// Jitter spreads each interval uniformly over [Interval−Jitter,
	// Interval+Jitter] so a fleet does not recalibrate in step. It must be
	// below Interval, and Rand must be set when it is positive.
	Jitter time.Duration
	// Rand draws the jitter; seed it for deterministic tests. The controller
	// uses it from Observe only, so it must not be shared with other
	// goroutines.
	Rand *rand.Rand
	// Limit is the limit pinned while recalibrating. 0 means a quarter of
	// the limit in force when the pin starts, or of the requests in flight
	// when the sample that starts it was admitted if fewer (rounded up),
	// at least MinLimit: low enough that a backend at its knee drains to
	// near its no-load latency, not so low that the pin starves it. A limit
	// may stand far above what is used (an open loop; a backend that has
	// just lost capacity): pinned at a quarter of the limit, the backend
	// still queues. capacity-drop-defaults recalibrates just as its
	// backend drops to a third: vegas's pin of 13 (of 49) on a knee of 20
	// measured 68 ms as the no-load RTT, not 50, and held it at 19 in
	// flight (p99 100.9 ms, bound 100) until the next recalibration.
	Limit int
	// RequestCount is how many samples re-measure the no-load RTT. 0 means
	// 20.
	RequestCount int
}

// Defaults for Recalibration's zero fields.
const (
	DefaultRecalibrationInterval = 15 * time.Second
	DefaultRecalibrationRequests = 20
)

// recalPhase tells Observe what to do with a sample.
type recalPhase uint8

const (
	recalOff     recalPhase = iota // not recalibrating: apply the control law
	recalBegin                     // starts now: save the limit, pin it, empty the baseline; ignore the sample
	recalHold                      // pinned; ignore the sample
	recalMeasure                   // pinned; feed the sample's RTT to the baseline, nothing else
	recalEnd                       // feed the sample's RTT, then restore the saved limit
)

// recalibrator schedules recalibrations on the Observe timeline.
type recalibrator struct {
	cfg      Recalibration // resolved; Interval 0 means off
	b        bounds
	next     time.Time // when the next recalibration starts; zero before the first Observe
	active   bool
	since    time.Time // when the active recalibration pinned the limit
	seen     int       // samples measured so far; Invariant: 0 ≤ seen < cfg.RequestCount while active
	saved    float64   // the controller's level when the active recalibration began (see hold)
	inflight int       // Inflight of the sample that began it (see pin); 0: unknown
	// measured holds the active recalibration's RTTs; its median becomes
	// the no-load RTT (a minimum of jittered samples would sit below the
	// typical unloaded answer, and sink further with every sample after).
	measured []time.Duration
}

// newRecalibrator validates c against b for the controller ctrl.
func newRecalibrator(ctrl string, c Recalibration, b bounds) (recalibrator, error) {
	if c.Interval < 0 {
		if c.Jitter != 0 || c.Limit != 0 || c.RequestCount != 0 {
			return recalibrator{}, fmt.Errorf("adaptive: %s: Recalibration has settings but a negative Interval (off): drop them or set Interval", ctrl)
		}
		return recalibrator{}, nil
	}
	if c.Interval == 0 {
		c.Interval = DefaultRecalibrationInterval
	}
	switch {
	case c.Jitter < 0 || c.Jitter >= c.Interval:
		return recalibrator{}, fmt.Errorf("adaptive: %s: Recalibration.Jitter %v outside [0, Interval %v)", ctrl, c.Jitter, c.Interval)
	case c.Jitter > 0 && c.Rand == nil:
		return recalibrator{}, fmt.Errorf("adaptive: %s: Recalibration.Jitter needs a Rand: pass a seeded *rand.Rand", ctrl)
	case c.RequestCount < 0:
		return recalibrator{}, fmt.Errorf("adaptive: %s: Recalibration.RequestCount %d is negative", ctrl, c.RequestCount)
	}
	if c.Limit != 0 && (c.Limit < b.min || c.Limit > b.max) {
		return recalibrator{}, fmt.Errorf("adaptive: %s: Recalibration.Limit %d outside [MinLimit %d, MaxLimit %d]", ctrl, c.Limit, b.min, b.max)
	}
	if c.RequestCount == 0 {
		c.RequestCount = DefaultRecalibrationRequests
	}
	return recalibrator{cfg: c, b: b}, nil
}

// on reports whether recalibration is enabled.
func (r *recalibrator) on() bool { return r.cfg.Interval > 0 }

// pin is the limit to hold while recalibrating, from the limit in force.
func (r *recalibrator) pin(limit int) int {
	if r.cfg.Limit != 0 {
		return r.cfg.Limit
	}
	if r.inflight > 0 && r.inflight < limit {
		limit = r.inflight
	}
	return r.b.clamp((limit + 3) / 4)
}

// phase advances the schedule to now and classifies s.
func (r *recalibrator) phase(now time.Time, s Sample) recalPhase {
	if r.cfg.Interval == 0 {
		return recalOff
	}
	if r.next.IsZero() {
		r.schedule(now)
	}
	if !r.active {
		if now.Before(r.next) {
			return recalOff
		}
		r.active, r.since, r.seen = true, now, 0
		r.inflight = s.Inflight
		return recalBegin
	}
	if s.Outcome != OK || s.Start.Before(r.since) {
		return recalHold
	}
	r.seen++
	if r.seen < r.cfg.RequestCount {
		return recalMeasure
	}
	r.active = false
	r.schedule(now)
	return recalEnd
}

// step is phase plus the baseline's bookkeeping, which is the same for
// every controller: a recalibration empties the no-load baseline when it
// starts and feeds it the samples that re-measure it. hold then pins and
// restores the controller's limit.
func (r *recalibrator) step(now time.Time, s Sample, rtt time.Duration, noload *minWindow) recalPhase {
	p := r.phase(now, s)
	switch p {
	case recalBegin:
		noload.reset()
		r.measured = r.measured[:0]
	case recalMeasure:
		r.measured = append(r.measured, rtt)
	case recalEnd:
		r.measured = append(r.measured, rtt)
		slices.Sort(r.measured)
		noload.fix(percentile(r.measured, 0.5))
	}
	return p
}

// hold applies p, a phase other than recalOff, to a controller whose limit
// is limit and whose level — what a recalibration saves and restores: its
// limit, or gradient2's estimate — is level. It returns the limit and the
// level then in force: the pin from the start (the level saved), the
// saved level back at the end, and both unchanged between.
func (r *recalibrator) hold(p recalPhase, limit int, level float64) (int, float64) {
	switch p {
	case recalBegin:
		r.saved = level
		return r.pin(limit), level
	case recalEnd:
		return r.b.clamp(int(r.saved)), r.saved
	}
	return limit, level
}

func (r *recalibrator) schedule(now time.Time) {
	d := r.cfg.Interval
	if j := r.cfg.Jitter; j > 0 {
		d += time.Duration(r.cfg.Rand.Int64N(int64(2*j)+1)) - j
	}
	r.next = now.Add(d)
}

// rebase moves the level a recalibration under way restores to level, and
// reports whether one is under way (the limit then stays pinned).
func (r *recalibrator) rebase(level float64) bool {
	if r.active {
		r.saved = level
	}
	return r.active
}

// level is the controller's level, limit unless a recalibration under way
// pins it: then the level it will restore.
func (r *recalibrator) level(limit int) int {
	if r.active {
		return r.b.clamp(int(r.saved))
	}
	return limit
}

// rebaseTo is Rebaser.Rebase for a controller with bounds b, recalibrator
// r and pacing p whose limit is limit: the limit want moves it to
// (clamped), with the pacing shifted alike, and true; or, while r pins
// the limit, the limit unchanged and false, the level r restores moved
// instead.
func rebaseTo(b bounds, r *recalibrator, p *pacing, limit, want int) (int, bool) {
	to := b.clamp(want)
	if r.rebase(float64(to)) {
		return limit, false
	}
	p.shift(to - limit)
	return to, true
}
