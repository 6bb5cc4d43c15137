package sim

import (
	"slices"
	"time"
)

// Phase is one stretch of a run between two changes (the start, a capacity
// step, a load step), judged over its converged window [From, End): the phase
// less its first Scenario.Settle. Phases whose window would be empty are
// left out.
//
// The definitions, also in config/scenarios/README.md:
//
//   - latency is a request's service latency, from admission by the gate to
//     completion at the backend: what the gate's controller measures and
//     what the backend's other callers would see. Time spent waiting in the
//     queue is reported apart (P99EndToEnd) and is at most Queue.Timeout.
//   - a good request is one whose latency is at most GoodFactor × Base.
//   - capacity is the completions per second the backend sustains at the
//     concurrency where its throughput peaks (Backend.peak): for the
//     quadratic model c·Knee / (2·Base·E[J]), where its mean latency reaches
//     2 × Base. No limit can complete more.
//   - goodput is the good completions per second of the window, compared
//     with Target = min(Offered, Capacity), the most any gate could deliver.
//     Offered is the scenario's arrival rate, not the (random) count drawn;
//     a closed loop has none (Offered 0), and its Target is Capacity.
type Phase struct {
	Start, From, End time.Duration
	CapacityFactor   float64 // c
	Offered          float64 // arrival rate, requests per second
	Capacity         float64 // completions per second; see above
	Target           float64 // min(Offered, Capacity)
	Completed, Good  int     // completions in the window, and the good ones
	Goodput          float64 // good completions per second
	GoodputPct       float64 // 100 × Goodput / Target (100 when Target is 0)
	// P50 and P99 are the nearest-rank percentiles of the window's service
	// latencies; P99EndToEnd adds each request's queue wait.
	P50, P99, P99EndToEnd time.Duration
	// SettleP99 is the p99 service latency of the completions in the
	// settling time [Start, From) left out of the rest: the cost of
	// converging.
	SettleP99    time.Duration
	Dropped      int     // rejected (queue full) or timed out in the queue in the window
	Errors       int     // answered with an error, or given up by the client, in the window
	MeanLimit    float64 // mean of the gate's limit at the window's ticks
	MeanInflight float64 // mean in flight at the window's ticks
}

// changes returns the instants where the capacity or the load steps, 0
// first, ascending, without repeats.
func (s *Scenario) changes() []time.Duration {
	at := []time.Duration{0}
	for _, c := range s.Backend.Capacity {
		at = append(at, c.At)
	}
	for _, l := range s.Load {
		at = append(at, l.At)
	}
	slices.Sort(at)
	return slices.Compact(at)
}

// analyze cuts a run that ended at end (the scenario's duration, or when a
// closed loop's work was delivered) into phases; done, drops and failed are
// in time order.
func analyze(sc *Scenario, end time.Duration, rows []Row, done []completion, drops, failed []time.Duration) []Phase {
	var ch []time.Duration
	for _, t := range sc.changes() {
		if t < end {
			ch = append(ch, t)
		}
	}
	ch = append(ch, end)
	b := sc.Backend
	var out []Phase
	for i := 0; i+1 < len(ch); i++ {
		p := Phase{Start: ch[i], From: ch[i] + sc.Settle, End: ch[i+1]}
		if p.From >= p.End {
			continue
		}
		p.CapacityFactor = b.capacityAt(p.Start)
		p.Offered, _ = sc.rateAt(p.Start)
		_, p.Capacity = b.peak(p.CapacityFactor)
		p.Target = min(p.Offered, p.Capacity)
		if sc.Clients != nil {
			p.Target = p.Capacity
		}

		in := func(t time.Duration) bool { return t >= p.From && t < p.End }
		var service, e2e, settling []time.Duration
		for _, c := range done {
			if c.done >= p.Start && c.done < p.From {
				settling = append(settling, c.service)
			}
			if !in(c.done) {
				continue
			}
			service = append(service, c.service)
			e2e = append(e2e, c.service+c.wait)
			if c.service <= GoodFactor*b.Base {
				p.Good++
			}
		}
		p.Completed = len(service)
		p.Dropped = countIn(drops, in)
		p.Errors = countIn(failed, in)
		slices.Sort(service)
		slices.Sort(e2e)
		p.P50, p.P99 = percentile(service, 0.50), percentile(service, 0.99)
		p.P99EndToEnd = percentile(e2e, 0.99)
		slices.Sort(settling)
		p.SettleP99 = percentile(settling, 0.99)
		p.Goodput = float64(p.Good) / (p.End - p.From).Seconds()
		p.GoodputPct = 100
		if p.Target > 0 {
			p.GoodputPct = 100 * p.Goodput / p.Target
		}
		var n int
		for _, r := range rows {
			if r.T > p.From && r.T <= p.End {
				p.MeanLimit += float64(r.Limit)
				p.MeanInflight += float64(r.Inflight)
				n++
			}
		}
		if n > 0 {
			p.MeanLimit /= float64(n)
			p.MeanInflight /= float64(n)
		}
		out = append(out, p)
	}
	return out
}

func countIn(ts []time.Duration, in func(time.Duration) bool) int {
	n := 0
	for _, t := range ts {
		if in(t) {
			n++
		}
	}
	return n
}
