package adaptive

import "time"

// Snapshot is a Gate's state at one instant, for metrics and debugging. The
// latency and error figures cover the gate's last StatsWindow samples; the
// totals count since the gate was made.
type Snapshot struct {
	Name       string // GateConfig.Name
	Controller string // the controller's Name
	Limit      int    // the limit in force
	Inflight   int    // admitted, unreleased requests; above Limit only while draining after a decrease
	Queued     int    // requests waiting in the queue

	Samples   int           // samples in the window, of every outcome
	P95       time.Duration // 95th percentile RTT of the window's non-Dropped samples; 0 if none
	EWMA      time.Duration // their RTTs folded oldest first with weight DefaultEWMAAlpha; 0 if none
	ErrorRate float64       // Error and Timeout samples over the non-Dropped ones; 0 if none

	Allowed           int64 // requests admitted, at once or from the queue
	Rejected          int64 // requests refused at once: TryAcquire(Below) at the limit or ceiling, ErrLimit and ErrQueueFull
	RejectedQueueFull int64 // the ErrQueueFull part of Rejected
	TimedOutInQueue   int64 // requests that left the queue with ErrQueueTimeout
	Cancelled         int64 // requests whose context ended before Acquire returned a lease
	AdjustedUp        int64 // limit increases
	AdjustedDown      int64 // limit decreases
}

// Snapshot returns the gate's current state. It takes the gate's lock only
// to copy; the statistics are computed on the copy.
func (g *Gate) Snapshot() Snapshot {
	g.mu.Lock()
	s := Snapshot{
		Name:              g.name,
		Controller:        g.ctrl.Name(),
		Limit:             g.limit,
		Inflight:          g.inflight,
		Queued:            g.queue.len,
		Allowed:           g.n.allowed,
		Rejected:          g.n.rejected,
		RejectedQueueFull: g.n.rejectedQueueFull,
		TimedOutInQueue:   g.n.timedOutInQueue,
		Cancelled:         g.n.cancelled,
		AdjustedUp:        g.n.adjustedUp,
		AdjustedDown:      g.n.adjustedDown,
	}
	rtts, outcomes := g.stats.copy()
	g.mu.Unlock()

	s.Samples = len(rtts)
	lat, failed := rtts[:0], 0 // filter in place, keeping order
	for i, rtt := range rtts {
		if outcomes[i] == Dropped {
			continue
		}
		lat = append(lat, rtt)
		if outcomes[i].failed() {
			failed++
		}
	}
	if len(lat) > 0 {
		s.ErrorRate = float64(failed) / float64(len(lat))
		s.EWMA = ewma(lat, DefaultEWMAAlpha)
		s.P95 = sortedP95(lat)
	}
	return s
}

// statsRing keeps the last len(rtt) samples' RTTs and outcomes.
type statsRing struct {
	rtt     []time.Duration
	outcome []Outcome
	next    int // where the next sample goes
	n       int // Invariant: 0 ≤ n ≤ len(rtt)
}

func newStatsRing(size int) statsRing {
	return statsRing{rtt: make([]time.Duration, size), outcome: make([]Outcome, size)}
}

func (r *statsRing) add(rtt time.Duration, o Outcome) {
	r.rtt[r.next], r.outcome[r.next] = rtt, o
	r.next = (r.next + 1) % len(r.rtt)
	r.n = min(r.n+1, len(r.rtt))
}

// copy returns the samples oldest first, in fresh slices.
func (r *statsRing) copy() ([]time.Duration, []Outcome) {
	rtts, outcomes := make([]time.Duration, 0, r.n), make([]Outcome, 0, r.n)
	start := (r.next - r.n + len(r.rtt)) % len(r.rtt)
	for k := range r.n {
		i := (start + k) % len(r.rtt)
		rtts = append(rtts, r.rtt[i])
		outcomes = append(outcomes, r.outcome[i])
	}
	return rtts, outcomes
}
