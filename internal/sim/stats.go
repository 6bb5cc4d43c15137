package sim

import (
	"slices"
	"time"
)

// Stats sums up one run over [0, End): how its attempts ended, its latency,
// and time-weighted means of the gate's and the backend's state, in the
// manner of Vector's adaptive-concurrency harness (a level held for a
// second weighs a second, whatever the number of events).
//
// An attempt is one try at the gate: an open-loop arrival, or one of a
// closed-loop client's tries at a request. Every attempt ends exactly once:
//
//	Attempts = OK + Errors + Timeouts + Rejected + Pending
//
// and a closed-loop request is delivered (one OK attempt), failed (its last
// retry failed) or still in progress at End.
type Stats struct {
	// End is where the run stopped counting: when the last of
	// Clients.Requests was delivered (Finished), else Scenario.Duration.
	End      time.Duration
	Finished bool
	// Requests counts open-loop arrivals or closed-loop requests started;
	// Attempts adds the Retries.
	Requests, Attempts, Retries int
	// Delivered and Failed count closed-loop requests answered OK, and
	// given up after Clients.Retries failed retries; 0 in open loop.
	Delivered, Failed int
	OK                int // attempts answered OK
	Errors            int // answered with an error: the backend deferred them
	Timeouts          int // given up by the client at Clients.Timeout (in the queue or admitted)
	Rejected          int // refused by the gate: queue full (or no queue) at the limit, or timed out in the queue
	Pending           int // not ended at End: queued, admitted, or dropped and not yet given up
	// Dropped counts attempts the backend dropped (they end as Timeouts).
	Dropped int
	Good    int // OK answers with service latency ≤ GoodFactor × Base
	// Throughput and Goodput are OK and good answers per second of End.
	Throughput, Goodput float64
	// Levels are the gate's and the backend's levels over [0, End);
	// Settled the same over [Scenario.Settle, End), once the start is over.
	Levels
	Settled Levels
	// MeanLatency is the mean service latency of the OK answers, and
	// LatencyRatio that over Base: 1 on an idle backend.
	MeanLatency  time.Duration
	LatencyRatio float64
	// P50 and P99 are nearest-rank percentiles of the OK answers' service
	// latency; P99EndToEnd adds each one's wait in the gate's queue.
	P50, P99, P99EndToEnd time.Duration
}

// Levels are time-weighted means, over a stretch of a run, of the requests
// the gate has admitted (in flight), its limit, and the requests the backend
// is working on (abandoned ones included, dropped ones not); and the highest
// value of each.
type Levels struct {
	MeanInflight, MeanLimit, MeanBackend float64
	MaxInflight, MaxLimit, MaxBackend    int
}

// timeWeighted integrates the gate's and the backend's levels over virtual
// time, over the whole run and from settle on. Call advance before every
// change, with the levels held since the last call.
type timeWeighted struct {
	settle       time.Duration
	last         time.Duration
	all, settled levelSum
}

// levelSum is ∫ level dt of each level, in level·nanoseconds, over span
// nanoseconds, and the maxima.
type levelSum struct {
	span, inflight, limit, backend    float64
	maxInflight, maxLimit, maxBackend int
}

func (s *levelSum) add(dt float64, inflight, limit, backend int) {
	s.span += dt
	s.inflight += float64(inflight) * dt
	s.limit += float64(limit) * dt
	s.backend += float64(backend) * dt
	s.maxInflight = max(s.maxInflight, inflight)
	s.maxLimit = max(s.maxLimit, limit)
	s.maxBackend = max(s.maxBackend, backend)
}

// levels returns the means and maxima; zero means over an empty span.
func (s *levelSum) levels() Levels {
	l := Levels{MaxInflight: s.maxInflight, MaxLimit: s.maxLimit, MaxBackend: s.maxBackend}
	if s.span > 0 {
		l.MeanInflight, l.MeanLimit, l.MeanBackend = s.inflight/s.span, s.limit/s.span, s.backend/s.span
	}
	return l
}

// advance records that the levels given held from the last call until to.
func (tw *timeWeighted) advance(to time.Duration, inflight, limit, backend int) {
	tw.all.add(float64(to-tw.last), inflight, limit, backend)
	if to > tw.settle {
		tw.settled.add(float64(to-max(tw.last, tw.settle)), inflight, limit, backend)
	}
	tw.last = to
}

// summarize completes st, whose counts the run has kept, from the OK
// answers done and the levels tw integrated up to st.End.
func (st *Stats) summarize(base time.Duration, tw *timeWeighted, done []completion) {
	if secs := st.End.Seconds(); secs > 0 {
		st.Throughput = float64(st.OK) / secs
		st.Goodput = float64(st.Good) / secs
	}
	st.Levels, st.Settled = tw.all.levels(), tw.settled.levels()
	st.Pending = st.Attempts - st.OK - st.Errors - st.Timeouts - st.Rejected
	if len(done) == 0 {
		return
	}
	service := make([]time.Duration, len(done))
	e2e := make([]time.Duration, len(done))
	var sum float64
	for i, c := range done {
		service[i], e2e[i] = c.service, c.service+c.wait
		sum += float64(c.service)
	}
	st.MeanLatency = time.Duration(sum / float64(len(done)))
	st.LatencyRatio = sum / float64(len(done)) / float64(base)
	slices.Sort(service)
	slices.Sort(e2e)
	st.P50, st.P99 = percentile(service, 0.50), percentile(service, 0.99)
	st.P99EndToEnd = percentile(e2e, 0.99)
}
