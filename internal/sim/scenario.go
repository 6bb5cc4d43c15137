package sim

import (
	"fmt"
	"strings"
	"time"
)

// GoodFactor defines a good request: one whose service latency is at most
// GoodFactor × Backend.Base, the no-load latency. It is fixed, not a scenario
// knob, so that every scenario is judged by the same bar.
const GoodFactor = 2

// Scenario is one simulation's inputs: a backend, the load offered to it, the
// queue in front of it and the controllers to compare. Times are offsets from
// the start of the run. A Scenario returned by Load or Parse is valid; one
// built in code should be checked with Validate. It is not modified by Run and
// may be shared between goroutines.
type Scenario struct {
	Name        string
	Description string
	// File is where the scenario was read from; "" when built in code.
	File string
	// Seed seeds the arrival and jitter streams. Every controller sees the
	// same arrivals and the same per-request jitter.
	Seed uint64
	// Duration is the simulated time; > 0.
	Duration time.Duration
	// Settle is the time after each change (the start, a capacity step, a
	// load step) that phase statistics leave out, so they judge controllers
	// once converged. 0 ≤ Settle.
	Settle      time.Duration
	Backend     Backend
	Load        []RateStep // Invariant: Load[0].At == 0, At strictly increasing
	Queue       Queue
	Controllers []ControllerSpec // Invariant: names unique
}

// Backend is the simulated service. A request admitted while n requests are
// at the backend (itself included) and the capacity factor is c takes
//
//	latency = (Base + k·(n/c)²) · J,  k = Base/Knee²
//	        = Base · (1 + (n/(c·Knee))²) · J
//
// where J is the request's jitter multiplier (lognormal, median 1, log-sigma
// Jitter). Its latency is fixed when it is admitted. c scales the concurrency
// the backend absorbs: at capacity c, latency reaches 2×Base at n = c·Knee,
// which is also the concurrency of peak throughput, c·Knee / (2·Base·E[J]).
type Backend struct {
	Base   time.Duration // no-load latency (the median when Jitter > 0); > 0
	Knee   float64       // concurrency at which latency is 2×Base when c = 1; > 0
	Jitter float64       // log-sigma of the latency multiplier; 0 = none; in [0, 1]
	// Capacity steps the capacity factor c; empty means 1 throughout.
	// Invariant: Capacity[0].At == 0, At strictly increasing.
	Capacity []CapacityStep
}

// CapacityStep sets the backend's capacity factor from At on.
type CapacityStep struct {
	At     time.Duration
	Factor float64 // > 0; 1 is the healthy backend
}

// RateStep sets the Poisson arrival rate from At on.
type RateStep struct {
	At   time.Duration
	Rate float64 // requests per second; ≥ 0
}

// Queue is the bounded FIFO waiting room in front of the gate. A request the
// gate does not admit at once waits in it, if fewer than Max are waiting, for
// at most Timeout, and is admitted when a slot frees; it mirrors
// adaptive.GateConfig's MaxQueue and QueueTimeout (FIFO).
type Queue struct {
	Max     int           // ≥ 0; 0 rejects at once at the limit
	Timeout time.Duration // > 0 when Max > 0
}

// Kinds of controller a ControllerSpec may name.
const (
	KindStatic    = "static"
	KindGradient2 = "gradient2"
	KindAIMD      = "aimd"
	KindP95       = "p95"
	KindVegas     = "vegas"
)

var kinds = []string{KindStatic, KindGradient2, KindAIMD, KindP95, KindVegas}

// ControllerSpec names one controller to simulate and its parameters.
type ControllerSpec struct {
	// Name labels the controller's rows, files and chart panel; unique in a
	// scenario; defaults to Kind.
	Name string
	Kind string // one of static, gradient2, aimd, p95, vegas
	// MinLimit, MaxLimit and InitialLimit bound an adaptive controller; 0
	// means the adaptive package's default.
	MinLimit, MaxLimit, InitialLimit int
	// Limit is a static controller's fixed limit; ≥ 1 for static, 0 otherwise.
	Limit int
	// Params are the controller's own parameters by name (see
	// config/scenarios/README.md); values as written.
	Params map[string]Param
	Line   int // where the spec starts in File; 0 when built in code
}

// Param is one controller parameter as written.
type Param struct {
	Value string
	Line  int
}

// capacityAt returns the capacity factor in force at t.
func (b Backend) capacityAt(t time.Duration) float64 {
	f := 1.0
	for _, s := range b.Capacity {
		if s.At > t {
			break
		}
		f = s.Factor
	}
	return f
}

// rateAt returns the arrival rate in force at t and when it next changes
// (end, or the scenario's duration).
func (s *Scenario) rateAt(t time.Duration) (rate float64, end time.Duration) {
	for _, st := range s.Load {
		if st.At > t {
			return rate, st.At
		}
		rate = st.Rate
	}
	return rate, s.Duration
}

// Error is one problem in a scenario. Its text is "file:line: field:
// message", where field is the YAML path (e.g. backend.capacity[1].factor).
type Error struct {
	File  string
	Line  int // 0 when unknown
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
	} else {
		b.WriteString("scenario")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Errors is every problem found in one scenario, reported at once.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Validate checks a scenario built in code (Load and Parse already have) and
// returns Errors, or nil. It also builds each controller once, so bad
// parameters are reported here rather than by Run.
func (s *Scenario) Validate() error {
	v := &validator{file: s.File}
	v.check(s)
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs
}

type validator struct {
	file string
	errs Errors
	line func(field string) int // where a field was written; nil in code
}

func (v *validator) errorf(field, format string, args ...any) {
	line := 0
	if v.line != nil {
		line = v.line(field)
	}
	v.errs = append(v.errs, &Error{File: v.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// maxRate bounds the arrival rate so a typo cannot make a run take hours.
const maxRate = 100_000

func (v *validator) check(s *Scenario) {
	if s.Duration <= 0 {
		v.errorf("duration", "must be a positive duration such as 240s, not %v", s.Duration)
	} else if s.Duration > 24*time.Hour {
		v.errorf("duration", "%v is more than the 24h a simulation may cover", s.Duration)
	}
	if s.Settle < 0 || (s.Duration > 0 && s.Settle >= s.Duration) {
		v.errorf("settle", "must lie in [0, duration), not %v", s.Settle)
	}
	b := s.Backend
	if b.Base <= 0 {
		v.errorf("backend.base_latency", "must be a positive duration such as 50ms, not %v", b.Base)
	}
	if !(b.Knee > 0) || b.Knee > 1e6 {
		v.errorf("backend.knee", "must be a concurrency in (0, 1e6], not %v", b.Knee)
	}
	if !(b.Jitter >= 0 && b.Jitter <= 1) {
		v.errorf("backend.jitter", "must lie in [0, 1] (a lognormal sigma; 0.05 is ±5%%), not %v", b.Jitter)
	}
	for i, st := range b.Capacity {
		f := fmt.Sprintf("backend.capacity[%d]", i)
		v.step(f, i, st.At, prevAt(b.Capacity, i, func(c CapacityStep) time.Duration { return c.At }), s.Duration)
		if !(st.Factor > 0 && st.Factor <= 100) {
			v.errorf(f+".factor", "must lie in (0, 100] (1 is the healthy backend), not %v", st.Factor)
		}
	}
	if len(s.Load) == 0 {
		v.errorf("load", "needs at least one step: load: [{at: 0s, rate: 300}]")
	}
	for i, st := range s.Load {
		f := fmt.Sprintf("load[%d]", i)
		v.step(f, i, st.At, prevAt(s.Load, i, func(r RateStep) time.Duration { return r.At }), s.Duration)
		if !(st.Rate >= 0 && st.Rate <= maxRate) {
			v.errorf(f+".rate", "must be requests per second in [0, %d], not %v", maxRate, st.Rate)
		}
	}
	if s.Queue.Max < 0 || s.Queue.Max > 1_000_000 {
		v.errorf("queue.max", "must lie in [0, 1000000], not %d", s.Queue.Max)
	}
	if s.Queue.Timeout < 0 || (s.Queue.Max > 0 && s.Queue.Timeout == 0) {
		v.errorf("queue.timeout", "must be a positive duration when queue.max > 0, not %v", s.Queue.Timeout)
	}
	if len(s.Controllers) == 0 {
		v.errorf("controllers", "needs at least one controller: controllers: [{kind: gradient2}]")
	}
	seen := map[string]int{}
	for i, c := range s.Controllers {
		f := fmt.Sprintf("controllers[%d]", i)
		if j, dup := seen[c.Name]; dup {
			v.errorf(f+".name", "%q is already the name of controllers[%d]; give one a distinct name", c.Name, j)
		}
		seen[c.Name] = i
		if _, err := c.build(s.Seed); err != nil {
			if pe, ok := err.(*paramError); ok {
				v.errorf(f+"."+pe.field, "%s", pe.msg)
			} else {
				v.errorf(f, "%v", err)
			}
		}
	}
}

// step checks one entry of a step list: the first at 0, then increasing, and
// all before the end of the run.
func (v *validator) step(field string, i int, at, prev, dur time.Duration) {
	switch {
	case i == 0 && at != 0:
		v.errorf(field+".at", "the first step must be at 0s, not %v", at)
	case i > 0 && at <= prev:
		v.errorf(field+".at", "%v is not after the previous step's %v; steps must be in time order", at, prev)
	case dur > 0 && at >= dur:
		v.errorf(field+".at", "%v is not before the end of the run (duration %v)", at, dur)
	}
}

func prevAt[T any](steps []T, i int, at func(T) time.Duration) time.Duration {
	if i == 0 {
		return -1
	}
	return at(steps[i-1])
}
