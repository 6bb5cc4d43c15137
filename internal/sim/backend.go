package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// maxLatency bounds a request's latency, so that a steep exponential model
// cannot overflow a time.Duration; no valid run is that long.
const maxLatency = 24 * time.Hour

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

// latency is the service time of a request admitted as the n-th at the
// backend at capacity factor c with jitter multiplier j; see Backend.
func (b Backend) latency(n int, c, j float64) time.Duration {
	var v float64
	switch b.Latency {
	case Linear, Exponential, Step:
		v = float64(b.Base) * b.shape(float64(n)/c) * j
	default:
		// Written as before the other models existed, so that quadratic
		// runs give the same bytes.
		x := float64(n) / (c * b.Knee)
		v = float64(b.Base) * (1 + x*x) * j
	}
	return time.Duration(min(v, float64(maxLatency)))
}

// shape is latency over Base, unjittered, at x requests in flight per unit
// of capacity; see Backend.
func (b Backend) shape(x float64) float64 {
	switch b.Latency {
	case Linear:
		return max(1, x/b.Knee)
	case Exponential:
		return math.Pow(b.Growth, max(0, x-b.Knee))
	case Step:
		if x <= b.Knee {
			return 1
		}
		return 2 * x / b.Knee
	}
	return 1 + (x/b.Knee)*(x/b.Knee)
}

// drawJitter draws one request's latency multiplier from rng. It takes one
// draw per call whatever the spread, so that the i-th request's multiplier
// does not depend on the controller; see JitterDist.
func (b Backend) drawJitter(rng *rand.Rand) float64 {
	if b.JitterDist == JitterExponential {
		return 1 + b.Jitter*rng.ExpFloat64()
	}
	z := rng.NormFloat64()
	if b.Jitter > 0 {
		return math.Exp(b.Jitter * z)
	}
	return 1
}

// meanJitter is E[J]; see JitterDist.
func (b Backend) meanJitter() float64 {
	if b.JitterDist == JitterExponential {
		return 1 + b.Jitter
	}
	return math.Exp(b.Jitter * b.Jitter / 2)
}

// peak returns the concurrency at which the backend's throughput is highest
// at capacity factor c (the smallest such, where throughput is flat), and
// that throughput in completions per second, n / (Base·shape(n/c)·E[J]) by
// Little's law, lowered by its caps:
//
//	quadratic    n = c·K            rps = c·K / (2·Base·E[J])
//	linear       n = c·K            rps = c·K / (Base·E[J]), and the same for any n above
//	exponential  n = c·m, m = max(K, 1/ln G)   rps = c·m / (Base·G^(m−K)·E[J])
//	step         n = c·K            rps = c·K / (Base·E[J]), half that past it
//
// A ConcurrencyCap below n moves the peak to the cap; a RateCap bounds rps.
// Throughput rises to the peak and no higher concurrency beats it, so no
// limit can complete more.
func (b Backend) peak(c float64) (n, rps float64) {
	switch b.Latency {
	case Exponential:
		n = c * max(b.Knee, 1/math.Log(b.Growth))
	default:
		n = c * b.Knee
	}
	if cc := b.ConcurrencyCap; cc != nil && float64(cc.Limit) < n {
		n = float64(cc.Limit)
	}
	rps = n / (b.Base.Seconds() * b.shape(n/c) * b.meanJitter())
	if b.Latency == Quadratic && n == c*b.Knee {
		rps = c * b.Knee / (2 * b.Base.Seconds() * b.meanJitter()) // as before the other models
	}
	if rc := b.RateCap; rc != nil {
		rps = min(rps, rc.Rate)
	}
	return n, rps
}

// fate is what the backend does with one request.
type fate uint8

const (
	serve fate = iota
	deferIt
	dropIt
)

// backendState is the simulated backend's mutable part in one run.
type backendState struct {
	b        *Backend
	inflight int // requests it is working on: served and being deferred, dropped ones not
	tokens   float64
	refilled time.Duration // when tokens was last brought up to date
}

func newBackendState(b *Backend) backendState {
	s := backendState{b: b}
	if b.RateCap != nil {
		s.tokens = b.RateCap.burst()
	}
	return s
}

// accept decides, at now, what the backend does with a request arriving at
// it with jitter multiplier j under capacity factor c. For one it answers
// (served or deferred) it counts it in and returns how long the answer
// takes: its latency at the backend's concurrency, itself included, or the
// cap's deferral latency. A dropped request is not counted.
func (s *backendState) accept(now time.Duration, c, j float64) (fate, time.Duration) {
	b := s.b
	n := s.inflight + 1
	var refused *Refusal
	if cc := b.ConcurrencyCap; cc != nil && n > cc.Limit {
		refused = &cc.Refusal
	} else if rc := b.RateCap; rc != nil {
		s.tokens = min(rc.burst(), s.tokens+rc.Rate*(now-s.refilled).Seconds())
		s.refilled = now
		if s.tokens >= 1 {
			s.tokens--
		} else {
			refused = &rc.Refusal
		}
	}
	switch {
	case refused == nil:
		s.inflight++
		return serve, b.latency(n, c, j)
	case refused.Action == Drop:
		return dropIt, 0
	}
	s.inflight++
	if refused.DeferLatency > 0 {
		return deferIt, refused.DeferLatency
	}
	return deferIt, time.Duration(float64(b.Base) * j)
}
