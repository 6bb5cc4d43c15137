package sim

import (
	"fmt"
	"strings"
	"time"
)

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
	v.backend(s)
	switch {
	case s.Clients != nil && len(s.Load) > 0:
		v.errorf("clients", "give either load (open-loop arrivals) or clients (a closed loop), not both")
	case s.Clients != nil:
		v.clients(s.Clients, s.Duration)
	case len(s.Load) == 0:
		v.errorf("load", "needs at least one step: load: [{at: 0s, rate: 300}]; or give clients for a closed loop")
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

// Bounds on the closed loop and the caps, so that a typo cannot make a run
// take hours or a backoff overflow.
const (
	maxClients    = 100_000
	maxRequests   = 10_000_000
	maxRetries    = 1000
	maxBackoffCap = time.Hour
	maxCapLimit   = 1_000_000
	maxGrowth     = 10
)

// backend checks the latency model and the caps.
func (v *validator) backend(s *Scenario) {
	b := s.Backend
	switch {
	case b.Latency > Step:
		v.errorf("backend.latency", "must be one of %s, not %v", strings.Join(latencyModels, ", "), b.Latency)
	case b.Latency == Exponential && !(b.Growth > 1 && b.Growth <= maxGrowth):
		v.errorf("backend.growth", "latency: exponential needs growth, the latency factor per request above the knee, in (1, %d] (e.g. 1.1), not %v", maxGrowth, b.Growth)
	case b.Latency != Exponential && b.Growth != 0:
		v.errorf("backend.growth", "applies only to latency: exponential, not %v", b.Latency)
	}
	if b.JitterDist > JitterExponential {
		v.errorf("backend.jitter_dist", "must be one of %s, not %v", strings.Join(jitterDists, ", "), b.JitterDist)
	}
	if cc := b.ConcurrencyCap; cc != nil {
		if cc.Limit < 1 || cc.Limit > maxCapLimit {
			v.errorf("backend.concurrency_cap.limit", "must be the most requests the backend serves at once, in [1, %d], not %d", maxCapLimit, cc.Limit)
		}
		v.refusal("backend.concurrency_cap", cc.Refusal, s)
	}
	if rc := b.RateCap; rc != nil {
		if !(rc.Rate > 0 && rc.Rate <= maxRate) {
			v.errorf("backend.rate_cap.rate", "must be requests per second in (0, %d], not %v", maxRate, rc.Rate)
		}
		if rc.Burst < 0 || rc.Burst > maxCapLimit {
			v.errorf("backend.rate_cap.burst", "must lie in [0, %d] (0: one second's worth), not %d", maxCapLimit, rc.Burst)
		}
		v.refusal("backend.rate_cap", rc.Refusal, s)
	}
}

func (v *validator) refusal(field string, ref Refusal, s *Scenario) {
	switch {
	case ref.Action > Drop:
		v.errorf(field+".action", "must be one of %s, not %v", strings.Join(capActions, ", "), ref.Action)
	case ref.Action == Drop && s.Clients == nil:
		v.errorf(field+".action", "drop needs clients: a dropped request ends only at its client's timeout, and open-loop requests have none")
	}
	if ref.DeferLatency < 0 || ref.DeferLatency > maxLatency {
		v.errorf(field+".defer_latency", "must lie in [0, %v] (0: the no-load latency), not %v", maxLatency, ref.DeferLatency)
	}
}

// clients checks a closed loop.
func (v *validator) clients(c *Clients, dur time.Duration) {
	if c.Count < 1 || c.Count > maxClients {
		v.errorf("clients.count", "must be the number of clients, in [1, %d], not %d", maxClients, c.Count)
	}
	if c.Requests < 0 || c.Requests > maxRequests {
		v.errorf("clients.requests", "must be the requests to deliver, in [0, %d] (0: work for the whole duration), not %d", maxRequests, c.Requests)
	}
	if c.Timeout <= 0 || (dur > 0 && c.Timeout > dur) {
		v.errorf("clients.timeout", "must be a positive duration no longer than the run (%v), such as 1s, not %v", dur, c.Timeout)
	}
	if c.Retries < 0 || c.Retries > maxRetries {
		v.errorf("clients.retries", "must lie in [0, %d], not %d", maxRetries, c.Retries)
	}
	if c.Backoff.Base <= 0 || c.Backoff.Base > maxBackoffCap {
		v.errorf("clients.backoff.base", "must be a positive duration no longer than %v, such as 100ms, not %v", maxBackoffCap, c.Backoff.Base)
	}
	if c.Backoff.Cap < c.Backoff.Base || c.Backoff.Cap > maxBackoffCap {
		v.errorf("clients.backoff.cap", "must lie in [base, %v], not %v", maxBackoffCap, c.Backoff.Cap)
	}
	if c.Think < 0 || c.Think > maxLatency {
		v.errorf("clients.think", "must lie in [0, %v], not %v", maxLatency, c.Think)
	}
}
