// Package sim is a deterministic discrete-event simulation of an adaptive
// concurrency gate in front of a backend that slows down under load.
//
// Time is virtual: a run is a loop over a heap of events (arrivals,
// completions, queue timeouts and once-a-second ticks), with no goroutines,
// no sleeping and no wall clock. Arrivals are Poisson at a rate that may step;
// the backend's latency grows with the square of its concurrency and shrinks
// or grows with a capacity factor that may step (see Backend). In front of it
// sits a real adaptive.Gate driven through TryAcquire and Lease.Release at
// the virtual now, with the bounded FIFO queue modelled here (see Queue).
//
// Every controller of a scenario runs against the same inputs: arrivals and
// per-request jitter come from streams seeded by Scenario.Seed alone, and the
// i-th arrival always carries the i-th jitter draw. The same seed therefore
// gives the same Result, byte for byte once written as CSV.
package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// epoch is the wall-clock instant virtual time 0 maps to for the gate.
var epoch = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// Row is one second of a run, the kata's once-a-second line. Counts are over
// the second ending at T; Limit, Inflight and Queued are read at T.
type Row struct {
	T        time.Duration
	Capacity float64 // capacity factor in force at T
	Offered  float64 // arrival rate in force at T, requests per second
	Limit    int     // the gate's limit
	Inflight int     // requests admitted and not yet completed
	Queued   int     // requests waiting in the queue
	// P95 is the 95th percentile (nearest rank) of the service latency of the
	// requests that completed in the second; 0 when none did.
	P95       time.Duration
	Arrived   int // arrivals; the same for every controller of a scenario
	Admitted  int // admitted by the gate, at once or from the queue
	Rejected  int // turned away because the queue was full
	TimedOut  int // left the queue after waiting Queue.Timeout
	Completed int // completed at the backend
	Good      int // completed with service latency ≤ GoodFactor × Base
}

// Result is one controller's run through a scenario.
type Result struct {
	Controller string // the ControllerSpec's name
	Kind       string
	Rows       []Row   // one per second, T = 1s, 2s, … Duration
	Phases     []Phase // one per phase with a non-empty converged window
	// LimitChanges counts the gate's OnLimitChange calls over the run.
	LimitChanges int
}

// completion is one request that finished at the backend.
type completion struct {
	done, service, wait time.Duration
}

type request struct {
	arrive time.Duration
	jitter float64 // latency multiplier
	admit  time.Duration
	lease  adaptive.Lease
	queued bool // waiting in the queue
}

type eventKind uint8

const (
	evArrival eventKind = iota
	evDone
	evTimeout
	evTick
)

type event struct {
	at   time.Duration
	seq  uint64 // breaks ties in scheduling order, so runs are reproducible
	kind eventKind
	req  *request
}

// run is the state of one controller's run.
type run struct {
	sc   *Scenario
	gate *adaptive.Gate
	clk  *clock.Fake

	now      time.Duration
	events   []event // binary min-heap on (at, seq)
	seq      uint64
	arrivals *rand.Rand
	jitter   *rand.Rand

	queue    []*request // FIFO; entries no longer queued are skipped lazily
	qhead    int
	queued   int // live entries in queue
	inflight int

	cur          Row             // the second being accumulated
	curLatencies []time.Duration // service latencies completed this second
	rows         []Row
	done         []completion
	drops        []time.Duration // when requests were rejected or timed out
	changes      int
}

// RunAll runs every controller of sc, in order.
func RunAll(sc *Scenario) ([]*Result, error) {
	out := make([]*Result, 0, len(sc.Controllers))
	for _, c := range sc.Controllers {
		r, err := Run(sc, c)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Run simulates one controller through sc, which must be valid.
func Run(sc *Scenario, spec ControllerSpec) (*Result, error) {
	ctl, err := spec.build(sc.Seed)
	if err != nil {
		return nil, fmt.Errorf("sim: controller %s: %w", spec.Name, err)
	}
	r := &run{
		sc:       sc,
		clk:      clock.NewFake(epoch),
		arrivals: rand.New(rand.NewPCG(sc.Seed, 0x6172726976616c73)), // "arrivals"
		jitter:   rand.New(rand.NewPCG(sc.Seed, 0x6a6974746572)),     // "jitter"
	}
	r.gate, err = adaptive.NewGate(adaptive.GateConfig{
		Name:          sc.Name + "/" + spec.Name,
		Controller:    ctl,
		MaxQueue:      sc.Queue.Max,
		QueueTimeout:  sc.Queue.Timeout,
		Clock:         r.clk,
		OnLimitChange: func(_, _ int) { r.changes++ },
	})
	if err != nil {
		return nil, fmt.Errorf("sim: controller %s: %w", spec.Name, err)
	}
	if t, ok := r.nextArrival(0); ok {
		r.schedule(t, evArrival, nil)
	}
	r.schedule(time.Second, evTick, nil)
	for len(r.events) > 0 {
		e := r.pop()
		if e.at > sc.Duration {
			break
		}
		r.now = e.at
		r.clk.Set(epoch.Add(e.at))
		switch e.kind {
		case evArrival:
			r.arrive()
			if t, ok := r.nextArrival(e.at); ok {
				r.schedule(t, evArrival, nil)
			}
		case evDone:
			r.complete(e.req)
		case evTimeout:
			if e.req.queued {
				e.req.queued = false
				r.queued--
				r.cur.TimedOut++
				r.drops = append(r.drops, r.now)
			}
		case evTick:
			if err := r.tick(); err != nil {
				return nil, fmt.Errorf("sim: controller %s: %w", spec.Name, err)
			}
			if next := e.at + time.Second; next <= sc.Duration {
				r.schedule(next, evTick, nil)
			}
		}
	}
	res := &Result{Controller: spec.Name, Kind: spec.Kind, Rows: r.rows, LimitChanges: r.changes}
	res.Phases = analyze(sc, r.rows, r.done, r.drops)
	return res, nil
}

// nextArrival draws the first arrival after t. Within a step the gaps are
// exponential at the step's rate; a gap that would cross into the next step
// is redrawn from the step boundary at the new rate, which is exact for a
// Poisson process because it is memoryless.
func (r *run) nextArrival(t time.Duration) (time.Duration, bool) {
	for t < r.sc.Duration {
		rate, end := r.sc.rateAt(t)
		if rate > 0 {
			gap := time.Duration(r.arrivals.ExpFloat64() / rate * float64(time.Second))
			if t+gap < end {
				return t + gap, true
			}
		}
		t = end
	}
	return 0, false
}

// arrive handles one arrival: admit it at once, queue it, or reject it.
func (r *run) arrive() {
	req := &request{arrive: r.now, jitter: 1}
	r.cur.Arrived++
	// Draw for every arrival, jittered or not, so that the i-th request's
	// multiplier does not depend on the controller.
	z := r.jitter.NormFloat64()
	if s := r.sc.Backend.Jitter; s > 0 {
		req.jitter = math.Exp(s * z)
	}
	if r.queued == 0 {
		if lease, ok := r.gate.TryAcquire(epoch.Add(r.now)); ok {
			r.admit(req, lease)
			return
		}
	}
	if r.queued >= r.sc.Queue.Max {
		r.cur.Rejected++
		r.drops = append(r.drops, r.now)
		return
	}
	if r.queued == 0 {
		clear(r.queue)
		r.queue, r.qhead = r.queue[:0], 0 // only timed-out entries are left
	}
	req.queued = true
	r.queue = append(r.queue, req)
	r.queued++
	r.schedule(r.now+r.sc.Queue.Timeout, evTimeout, req)
}

// admit starts req at the backend, fixing its latency from the concurrency
// and capacity now.
func (r *run) admit(req *request, lease adaptive.Lease) {
	r.inflight++
	req.admit, req.lease = r.now, lease
	r.cur.Admitted++
	r.schedule(r.now+r.sc.Backend.latency(r.inflight, r.sc.Backend.capacityAt(r.now), req.jitter), evDone, req)
}

// latency is the service time of a request admitted as the n-th in flight at
// capacity factor c with jitter multiplier j; see Backend.
func (b Backend) latency(n int, c, j float64) time.Duration {
	x := float64(n) / (c * b.Knee)
	return time.Duration(float64(b.Base) * (1 + x*x) * j)
}

// complete finishes req at the backend, releases its lease (which feeds the
// controller) and admits waiters into the freed slots.
func (r *run) complete(req *request) {
	r.inflight--
	req.lease.Release(epoch.Add(r.now), adaptive.OK)
	c := completion{done: r.now, service: r.now - req.admit, wait: req.admit - req.arrive}
	r.done = append(r.done, c)
	r.cur.Completed++
	if c.service <= GoodFactor*r.sc.Backend.Base {
		r.cur.Good++
	}
	r.curLatencies = append(r.curLatencies, c.service)
	r.drain()
}

// drain admits queued requests, oldest first, while the gate has room.
func (r *run) drain() {
	for r.queued > 0 {
		req := r.queue[r.qhead]
		if !req.queued { // timed out
			r.popQueue()
			continue
		}
		lease, ok := r.gate.TryAcquire(epoch.Add(r.now))
		if !ok {
			return
		}
		r.popQueue()
		req.queued = false
		r.queued--
		r.admit(req, lease)
	}
	clear(r.queue) // nothing live is queued: drop the timed-out entries
	r.queue, r.qhead = r.queue[:0], 0
}

func (r *run) popQueue() {
	r.queue[r.qhead] = nil
	r.qhead++
	if r.qhead > 1024 && r.qhead*2 > len(r.queue) {
		r.queue = slices.Delete(r.queue, 0, r.qhead)
		r.qhead = 0
	}
}

// tick closes the second ending now.
func (r *run) tick() error {
	snap := r.gate.Snapshot()
	if snap.Inflight != r.inflight {
		return fmt.Errorf("at %v the gate reports %d in flight, the simulation %d", r.now, snap.Inflight, r.inflight)
	}
	row := r.cur
	row.T = r.now
	row.Capacity = r.sc.Backend.capacityAt(r.now)
	row.Offered, _ = r.sc.rateAt(r.now)
	row.Limit, row.Inflight, row.Queued = snap.Limit, r.inflight, r.queued
	slices.Sort(r.curLatencies)
	row.P95 = percentile(r.curLatencies, 0.95)
	r.rows = append(r.rows, row)
	r.cur, r.curLatencies = Row{}, r.curLatencies[:0]
	return nil
}

// percentile returns the q-quantile of sorted by the nearest-rank method: the
// smallest value with at least q of the values at or below it; 0 for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (r *run) schedule(at time.Duration, k eventKind, req *request) {
	r.seq++
	r.events = append(r.events, event{at: at, seq: r.seq, kind: k, req: req})
	// Sift up.
	h := r.events
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if !h[i].before(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (e event) before(o event) bool {
	return e.at < o.at || (e.at == o.at && e.seq < o.seq)
}

func (r *run) pop() event {
	h := r.events
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	// Sift down.
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(h) && h[l].before(h[m]) {
			m = l
		}
		if l+1 < len(h) && h[l+1].before(h[m]) {
			m = l + 1
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	r.events = h
	return top
}
