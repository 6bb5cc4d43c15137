package adaptive

import (
	"fmt"
	"math"
	"time"
)

// Signal is the latency statistic a P95 controller steers by.
type Signal uint8

const (
	// SignalP95 is the 95th percentile (nearest rank) of the window.
	SignalP95 Signal = iota
	// SignalEWMA is the window's samples folded oldest first into an
	// exponentially weighted moving average (P95Config.EWMAAlpha).
	SignalEWMA
)

// P95Config configures a P95 controller. Target is required; the other zero
// fields take the documented defaults.
type P95Config struct {
	// MinLimit, MaxLimit and InitialLimit bound and start the limit; 0 means
	// DefaultMinLimit, DefaultMaxLimit and DefaultInitialLimit.
	MinLimit, MaxLimit, InitialLimit int
	// Target is the latency to hold the signal at. Required.
	Target time.Duration
	// Signal is what is compared with Target. The zero value is SignalP95.
	Signal Signal
	// Tolerance is the half-width of the hold band around Target, as a
	// fraction of it, in (0, 1). 0 means 0.1.
	Tolerance float64
	// IncreaseStep is added to the limit when the signal is below the band.
	// 0 means 1.
	IncreaseStep int
	// DecreaseFactor multiplies the limit (rounding down) when the signal is
	// above the band or the error rate above MaxErrorRate, in (0, 1). 0 means
	// 0.7.
	DecreaseFactor float64
	// MaxDecreaseStep caps how much one decrease may take off. 0 means no cap.
	MaxDecreaseStep int
	// Window is how far back, from the now of an evaluation, samples count. 0
	// means 3s.
	Window time.Duration
	// MaxSamples bounds the samples held; beyond it the oldest are dropped
	// even inside Window. 0 means 1024.
	MaxSamples int
	// MinSamples is how many latency samples the window must hold before the
	// limit moves. 0 means 20.
	MinSamples int
	// TickInterval is how often, in the now passed to Observe, the limit is
	// evaluated; evaluation happens lazily on the first Observe at or after
	// the tick. 0 means 1s.
	TickInterval time.Duration
	// Cooldown holds the limit for this long after a decrease, so the next
	// evaluation sees the effect of the last one. 0 means no cooldown.
	Cooldown time.Duration
	// MaxErrorRate lowers the limit at an evaluation whenever the error rate
	// of the samples since the previous one (Error, Timeout and Overdue over
	// all but Dropped; at least 5 samples) is above it, even when latency is
	// fine: a backend
	// that answers fast errors when overloaded looks fast. 0 means 0.05; a
	// negative value disables it (errors then only leave the latency
	// window).
	MaxErrorRate float64
	// EWMAAlpha is the weight of each newer sample for SignalEWMA, in (0, 1].
	// 0 means 0.2.
	EWMAAlpha float64
	// MinUtilization: the limit rises only if some sample since the last
	// evaluation was admitted with Inflight ≥ limit·MinUtilization. 0 means
	// 1 (see Gradient2Config); a negative value disables the guard.
	MinUtilization float64
}

// Defaults for P95Config's zero fields.
const (
	DefaultP95Tolerance      = 0.1
	DefaultP95IncreaseStep   = 1
	DefaultP95DecreaseFactor = 0.7
	DefaultP95Window         = 3 * time.Second
	DefaultP95MaxSamples     = 1024
	DefaultP95MinSamples     = 20
	DefaultP95TickInterval   = time.Second
	DefaultEWMAAlpha         = 0.2
	DefaultP95MaxErrorRate   = 0.05
)

// minErrorSamples is how many samples since the previous evaluation the
// error rate needs: one failure in two is not a rate.
const minErrorSamples = 5

// P95 steers the limit to hold a windowed latency statistic near a target,
// increasing slowly and decreasing fast. Every TickInterval it computes the
// signal over the samples of the last Window: above Target·(1+Tolerance) the
// limit is multiplied by DecreaseFactor; below Target·(1−Tolerance) it gains
// IncreaseStep; inside the band it holds. Until its first decrease it is
// in slow start: it is judged also after every round of answers (twice
// the limit, at least MinSamples, and at least OverdueAfter since the
// last judgement, so a request the last rise sent past a cap that drops it
// is found lost first), and below the band its rise doubles per round —
// IncreaseStep, then 2, 4 … steps, at most doubling the limit, as
// pacing's start-up (a step a second took 30 s to go from 10 to 40 on a
// backend with room for 300). Above MaxErrorRate errors
// (Error, Timeout, Overdue) since the previous evaluation it decreases at
// once, from what was in flight. A Timeout — a request the backend never
// answered: the client gave up, or the gate found it lost — decreases it at
// once too, from what was in flight, once per congestion event (see
// recovery), as it does every controller: an error may be the
// application's and is weighed as a rate, but silence above a cap is the
// backend's, and a rate of it lets a drop a second through (1.2 a second
// on drop-cap, under 1%). Dropped samples are ignored; Error, Overdue and
// Timeout samples count towards the error rate, not the latency signal.
//
// A P95 is not safe for concurrent use; see Controller.
type P95 struct {
	c     P95Config // resolved
	b     bounds
	limit int // Invariant: b.min ≤ limit ≤ b.max

	// The window: a ring of samples in completion order.
	at      []time.Time
	start   []time.Time // when each was admitted
	rtt     []time.Duration
	outcome []Outcome
	head    int // oldest sample
	size    int // Invariant: 0 ≤ size ≤ MaxSamples
	scratch []time.Duration

	next time.Time // the next evaluation; zero before the first Observe
	// recent and recentFailed count the samples (all but Dropped) and the
	// failed ones since the previous evaluation: the error rate's window.
	recent, recentFailed int
	calmUntil            time.Time // end of the cooldown after the last decrease
	losses               recovery  // Timeout
	peak                 int       // highest Inflight since the last evaluation
	// cut is set by the first decrease: slow start is over (see P95).
	cut  bool
	last time.Time // the last evaluation
	// decreased is when the limit was last decreased: the latency signal
	// leaves out the samples admitted before it, which the decrease
	// answered (as recovery does for losses). Without it one overshoot,
	// still in a 500 ms window at a 100 ms tick, cut 16 → 12 → 9 → 7 → 6.
	decreased time.Time
	// raised is when the limit was last raised: good counts a limit only
	// if the answers admitted since are below the band.
	raised time.Time
	// good is the highest limit an evaluation found below the band, on
	// answers admitted under it, since the last decrease below it (0:
	// none): a decrease for latency leaves the limit
	// there, not ×DecreaseFactor, when that is less deep, and the limit
	// then regrows past it along pacing's loss curve (CUBIC's plateau),
	// as the other controllers do past a knee (see knee).
	good int
	pace pacing
}

// NewP95 returns a P95 controller for c.
func NewP95(c P95Config) (*P95, error) {
	const name = "p95"
	b, err := resolveBounds(name, c.MinLimit, c.MaxLimit, c.InitialLimit)
	if err != nil {
		return nil, err
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Tolerance, DefaultP95Tolerance)
	def(&c.DecreaseFactor, DefaultP95DecreaseFactor)
	def(&c.EWMAAlpha, DefaultEWMAAlpha)
	def(&c.MinUtilization, DefaultMinUtilization)
	def(&c.MaxErrorRate, DefaultP95MaxErrorRate)
	if c.IncreaseStep == 0 {
		c.IncreaseStep = DefaultP95IncreaseStep
	}
	if c.Window == 0 {
		c.Window = DefaultP95Window
	}
	if c.MaxSamples == 0 {
		c.MaxSamples = DefaultP95MaxSamples
	}
	if c.MinSamples == 0 {
		c.MinSamples = DefaultP95MinSamples
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultP95TickInterval
	}
	switch {
	case c.Target <= 0:
		return nil, fmt.Errorf("adaptive: %s: Target %v: set it to the latency to hold, e.g. 100ms", name, c.Target)
	case c.Signal > SignalEWMA:
		return nil, fmt.Errorf("adaptive: %s: unknown Signal %d", name, c.Signal)
	case c.IncreaseStep < 0 || c.MaxDecreaseStep < 0:
		return nil, fmt.Errorf("adaptive: %s: IncreaseStep %d and MaxDecreaseStep %d must not be negative", name, c.IncreaseStep, c.MaxDecreaseStep)
	case c.Window < 0 || c.TickInterval < 0 || c.Cooldown < 0:
		return nil, fmt.Errorf("adaptive: %s: Window %v, TickInterval %v and Cooldown %v must not be negative", name, c.Window, c.TickInterval, c.Cooldown)
	case c.MaxSamples < 0 || c.MinSamples < 0:
		return nil, fmt.Errorf("adaptive: %s: MaxSamples %d and MinSamples %d must not be negative", name, c.MaxSamples, c.MinSamples)
	case c.MinSamples > c.MaxSamples:
		return nil, fmt.Errorf("adaptive: %s: MinSamples %d above MaxSamples %d: the limit could never move", name, c.MinSamples, c.MaxSamples)
	case !(c.Tolerance > 0 && c.Tolerance < 1):
		return nil, fmt.Errorf("adaptive: %s: Tolerance %v outside (0, 1)", name, c.Tolerance)
	case !(c.DecreaseFactor > 0 && c.DecreaseFactor < 1):
		return nil, fmt.Errorf("adaptive: %s: DecreaseFactor %v outside (0, 1)", name, c.DecreaseFactor)
	}
	for _, f := range []struct {
		field string
		v, lo float64
		hi    float64
	}{
		{"MaxErrorRate", c.MaxErrorRate, math.Inf(-1), 1},
		{"EWMAAlpha", c.EWMAAlpha, 1e-9, 1},
		{"MinUtilization", c.MinUtilization, math.Inf(-1), 1},
	} {
		if err := checkFrac(name, f.field, f.v, f.lo, f.hi); err != nil {
			return nil, err
		}
	}
	return &P95{
		c:       c,
		b:       b,
		limit:   b.initial,
		at:      make([]time.Time, c.MaxSamples),
		start:   make([]time.Time, c.MaxSamples),
		rtt:     make([]time.Duration, c.MaxSamples),
		outcome: make([]Outcome, c.MaxSamples),
		scratch: make([]time.Duration, 0, c.MaxSamples),
	}, nil
}

// Name returns "p95".
func (*P95) Name() string { return "p95" }

// Limit returns the limit now in force.
func (p *P95) Limit() int { return p.limit }

// OverdueAfter is twice Target: a request in flight longer is counted as
// a timeout already (see Overdue).
func (p *P95) OverdueAfter() time.Duration { return 2 * p.c.Target }

// Observe folds s in at now and, if a tick is due, re-evaluates the limit.
// It returns the limit now in force.
func (p *P95) Observe(now time.Time, s Sample) int {
	if s.Outcome != Dropped {
		i := (p.head + p.size) % len(p.at)
		if p.size == len(p.at) {
			p.head = (p.head + 1) % len(p.at)
		} else {
			p.size++
		}
		p.at[i], p.start[i], p.rtt[i], p.outcome[i] = now, s.Start, s.RTT, s.Outcome
		p.recent++
		if s.Outcome.failed() {
			p.recentFailed++
		}
	}
	p.peak = max(p.peak, s.Inflight)
	if p.next.IsZero() {
		p.next = now.Add(p.c.TickInterval)
	}
	// A request never answered is a loss (see recovery), cut for once per
	// congestion event; errors past MaxErrorRate are not left to the next
	// tick either: a backend answering fast errors takes a tick's worth of
	// requests meanwhile. The cut is from what was in flight when the
	// failed request was admitted, and the next evaluation a tick away.
	if !now.Before(p.calmUntil) && (s.Outcome == Timeout && p.losses.newEvent(now, s) || s.Outcome.failed() && p.erring()) {
		p.limit = min(p.limit, max(s.Inflight, p.b.min))
		p.decrease(now)
		p.recent, p.recentFailed, p.peak = 0, 0, 0
		p.next = now.Add(p.c.TickInterval)
		return p.limit
	}
	if now.Before(p.next) && !p.roundDone(now) {
		return p.limit
	}
	p.last, p.next = now, now.Add(p.c.TickInterval)
	p.evaluate(now)
	p.peak = 0
	return p.limit
}

// roundDone reports whether, in slow start, a round of answers has come
// in since the last evaluation: twice the limit, at least MinSamples, and
// at least OverdueAfter after it, so that a request the last rise sent
// past a cap that drops it is found lost (see OverdueReporter) before the
// next rise.
func (p *P95) roundDone(now time.Time) bool {
	return !p.cut && p.recent >= max(2*p.limit, p.c.MinSamples) && now.Sub(p.last) >= p.OverdueAfter()
}

// evaluate applies the control law to the window ending at now.
func (p *P95) evaluate(now time.Time) {
	cutoff := now.Add(-p.c.Window)
	for p.size > 0 && p.at[p.head].Before(cutoff) {
		p.head = (p.head + 1) % len(p.at)
		p.size--
	}
	if now.Before(p.calmUntil) {
		return
	}
	erring := p.erring()
	p.recent, p.recentFailed = 0, 0
	if erring {
		p.decrease(now)
		return
	}
	if p.size < p.c.MinSamples {
		return
	}
	target := float64(p.c.Target)
	// A decrease is judged on the samples admitted since the last one: the
	// ones before it were sent into the latency it answered.
	signal, ok := p.signal(p.decreased)
	crossed := p.good > 0 && (p.limit > p.good && p.limit-p.good <= p.c.IncreaseStep ||
		p.limit == p.good && float64(signal) <= target*(1+p.c.Tolerance))
	if ok && float64(signal) > target && crossed {
		// The last step took the signal from below the band to above the
		// target: it crossed a knee. Back to the limit below it, at once,
		// and past it again along pacing's loss curve (probing carefully):
		// held inside the band, make bench-gate's backend, whose latency
		// doubles one request past 40 in flight (102.5 ms, target 100 ms),
		// ran 2–3 s of every 7 at 41 and half its throughput.
		// At the good limit itself and inside the band, the good was
		// judged on answers the limit had not yet loaded (the first ones
		// after a rise), and the limit would hold there: a step back below
		// it (make bench-gate: one p95 sidecar held 41 at 102.5 ms, half
		// the backend's throughput, after a slow start that overshot to
		// 73 came back to a good 41). Above the band it is a decrease.
		from := p.limit
		p.limit = p.good
		if p.limit == from {
			p.limit = p.b.clamp(from - p.c.IncreaseStep)
		}
		p.decreased, p.good = now, 0
		p.pace.loss(now, float64(from), p.limit)
		return
	}
	if ok && float64(signal) > target*(1+p.c.Tolerance) {
		from := p.limit
		good := p.good
		p.decrease(now)
		if good > 0 && good < from {
			// Back to the last limit found below the band, then past it
			// along pacing's loss curve (see P95.good). It stays the
			// limit to come back to: the decrease was above it. Cleared,
			// a second decrease (an overshoot two steps past the knee, as
			// a fleet's slow start makes: 64 → 46 → 32 for a knee of 40)
			// fell ×0.7 below the knee and came back a step a tick.
			p.limit = p.b.clamp(max(p.limit, good))
			p.good = good
			p.pace.loss(now, float64(from), p.limit)
		}
		return
	}
	if signal, ok := p.signal(time.Time{}); ok && float64(signal) < target*(1-p.c.Tolerance) && utilized(Sample{Inflight: p.peak}, p.limit, p.c.MinUtilization, false) {
		// The limit is not good if the answers admitted under it, when
		// there are enough, are not below the band: the window's older
		// answers, admitted under a lower limit in slow start, may be all
		// that is fast (see good).
		if at, ok := p.signal(p.raised); !ok || float64(at) < target*(1-p.c.Tolerance) {
			p.good = max(p.good, p.limit)
		}
		l := p.limit
		if !p.cut { // slow start: the rise doubles per round trip (see pacing)
			p.limit = p.b.clamp(l + min(l, p.c.IncreaseStep*max(1, l-p.b.initial+1)))
		} else {
			c := math.MaxInt
			if p.pace.lossMax > 0 {
				c = max(p.limit, int(min(p.pace.ceiling(now), math.MaxInt32)))
			}
			p.limit = p.b.clamp(min(p.limit+p.c.IncreaseStep, c))
		}
		if p.limit > l {
			p.raised = now
		}
	}
}

// signal returns the latency statistic of the window's answers admitted
// at or after since; ok is false with fewer than MinSamples of them.
func (p *P95) signal(since time.Time) (time.Duration, bool) {
	lat := p.scratch[:0]
	for k := range p.size {
		i := (p.head + k) % len(p.at)
		// An error's RTT is not the backend's latency, an overdue request's
		// own sample comes later, and a timeout is a loss (Observe), its
		// RTT only when someone gave up.
		if o := p.outcome[i]; o != Error && o != Overdue && o != Timeout && !p.start[i].Before(since) {
			lat = append(lat, p.rtt[i])
		}
	}
	if len(lat) < p.c.MinSamples {
		return 0, false
	}
	if p.c.Signal == SignalEWMA {
		return ewma(lat, p.c.EWMAAlpha), true
	}
	return sortedP95(lat), true
}

// erring reports whether the error rate since the previous evaluation is
// above MaxErrorRate (over at least minErrorSamples samples).
func (p *P95) erring() bool {
	return p.c.MaxErrorRate > 0 && p.recent >= minErrorSamples && float64(p.recentFailed) > p.c.MaxErrorRate*float64(p.recent)
}

func (p *P95) decrease(now time.Time) {
	next := int(float64(p.limit) * p.c.DecreaseFactor)
	if p.c.MaxDecreaseStep > 0 {
		next = max(next, p.limit-p.c.MaxDecreaseStep)
	}
	p.limit = p.b.clamp(next)
	p.calmUntil = now.Add(p.c.Cooldown)
	p.cut = true
	p.decreased = now
	p.good = 0
}

// Rebase moves the limit to limit (see Rebaser), and the last limit found
// below the band with it.
func (p *P95) Rebase(limit int) int {
	to := p.b.clamp(limit)
	if p.good > 0 {
		p.good = max(0, p.good+to-p.limit)
	}
	p.pace.shift(to - p.limit)
	p.limit = to
	return p.limit
}

// Level is the limit: p95 does not recalibrate (see Rebaser).
func (p *P95) Level() int { return p.limit }
