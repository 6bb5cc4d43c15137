// Package sim is a deterministic discrete-event simulation of an adaptive
// concurrency gate in front of a backend that slows down under load.
//
// Time is virtual: a run is a loop over a heap of events (arrivals,
// completions, timeouts, client wake-ups and once-a-second ticks), with no
// goroutines, no sleeping and no wall clock. The load is open loop, Poisson
// arrivals at a rate that may step, or closed loop, clients with one request
// outstanding each, a timeout and retries (see Clients). The backend's
// latency grows with its concurrency in one of several shapes and shrinks or
// grows with a capacity factor that may step; above a concurrency or rate cap
// it may answer errors or drop requests (see Backend). In front of it sits a
// real adaptive.Gate driven through TryAcquire and Lease.Release at the
// virtual now, with the bounded FIFO queue modelled here (see Queue).
//
// Every controller of a scenario runs against the same inputs: arrivals and
// per-request jitter come from streams seeded by Scenario.Seed alone, and the
// i-th arrival (in closed loop, the i-th attempt) always carries the i-th
// jitter draw. The same seed therefore gives the same Result, byte for byte
// once written as CSV. Run and RunAll run a scenario's own controllers;
// RunWith runs one it does not build.
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
// the second ending at T; Limit, Inflight, Queued and Backend are read at T.
type Row struct {
	T        time.Duration
	Capacity float64 // capacity factor in force at T
	Offered  float64 // arrival rate in force at T, requests per second; 0 in closed loop
	Limit    int     // the gate's limit
	Inflight int     // requests admitted and not yet released
	Queued   int     // requests waiting in the queue
	// P95 is the 95th percentile (nearest rank) of the service latency of the
	// requests that completed OK in the second; 0 when none did.
	P95 time.Duration
	// Arrived counts open-loop arrivals, the same for every controller of a
	// scenario, or closed-loop attempts issued (first tries and retries).
	Arrived   int
	Admitted  int // admitted by the gate, at once or from the queue
	Rejected  int // turned away because the queue was full
	TimedOut  int // left the queue after waiting Queue.Timeout
	Completed int // answered OK by the backend
	Good      int // answered OK with service latency ≤ GoodFactor × Base
	Errors    int // answered with an error (deferred by a backend cap)
	// ClientTimeouts counts attempts their client gave up on; Retries the
	// attempts that were retries. Both 0 in open loop.
	ClientTimeouts, Retries int
	Backend                 int // requests the backend is working on
}

// Result is one controller's run through a scenario.
type Result struct {
	Controller string // the ControllerSpec's name, or RunWith's
	Kind       string
	Rows       []Row   // one per second, T = 1s, 2s, … to the run's end
	Phases     []Phase // one per phase with a non-empty converged window
	// LimitChanges counts the gate's OnLimitChange calls over the run.
	LimitChanges int
	Stats        Stats
	// extended: the scenario uses clients or a cap, so the CSV carries
	// their columns.
	extended bool
}

// completion is one request that finished OK at the backend.
type completion struct {
	done, service, wait time.Duration
}

// request is one attempt: an open-loop arrival or a client's try.
type request struct {
	arrive time.Duration // when it arrived, or its client issued it
	jitter float64       // latency multiplier
	admit  time.Duration
	lease  adaptive.Lease
	queued bool    // waiting in the queue
	client *client // whose try it is; nil in open loop
	// ended: answered, given up by its client or refused by the gate; its
	// lease, if any, is released. The backend may still be working on it.
	ended     bool
	deferred  bool // the backend answers it with an error
	atBackend bool // counted in the backend's concurrency
}

type eventKind uint8

const (
	evArrival eventKind = iota
	evDone              // the backend answers req
	evTimeout           // req's time in the queue is up
	evTick
	evGiveUp // req's client timeout
	evWake   // cl issues its next attempt
)

type event struct {
	at   time.Duration
	seq  uint64 // breaks ties in scheduling order, so runs are reproducible
	kind eventKind
	req  *request
	cl   *client
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
	inflight int // admitted, unreleased: the gate's count
	backend  backendState

	inProgress int  // closed loop: requests started and not yet delivered or failed
	finished   bool // closed loop: the work is delivered; the run ends at the next tick

	cur          Row             // the second being accumulated
	curLatencies []time.Duration // service latencies completed this second
	rows         []Row
	done         []completion
	drops        []time.Duration // when requests were rejected or timed out in the queue
	failed       []time.Duration // when attempts were answered with an error or given up
	changes      int
	stats        Stats
	levels       timeWeighted
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
	return runController(sc, spec.Name, spec.Kind, ctl)
}

// RunWith simulates ctl, a controller sc does not list (another library's
// limiter behind adaptive.Controller, say), through sc, which must be valid;
// sc.Controllers is ignored. name labels the Result; its Kind is ctl.Name().
// ctl must be fresh, and belongs to the run: it sees the same inputs as
// sc's own controllers, and is called from one goroutine only.
func RunWith(sc *Scenario, name string, ctl adaptive.Controller) (*Result, error) {
	if ctl == nil {
		return nil, fmt.Errorf("sim: RunWith %s: nil controller", name)
	}
	return runController(sc, name, ctl.Name(), ctl)
}

func runController(sc *Scenario, name, kind string, ctl adaptive.Controller) (*Result, error) {
	r := &run{
		sc:       sc,
		clk:      clock.NewFake(epoch),
		arrivals: rand.New(rand.NewPCG(sc.Seed, 0x6172726976616c73)), // "arrivals"
		jitter:   rand.New(rand.NewPCG(sc.Seed, 0x6a6974746572)),     // "jitter"
		backend:  newBackendState(&sc.Backend),
		levels:   timeWeighted{settle: sc.Settle},
	}
	var err error
	r.gate, err = adaptive.NewGate(adaptive.GateConfig{
		Name:          sc.Name + "/" + name,
		Controller:    ctl,
		MaxQueue:      sc.Queue.Max,
		QueueTimeout:  sc.Queue.Timeout,
		Clock:         r.clk,
		OnLimitChange: func(_, _ int) { r.changes++ },
	})
	if err != nil {
		return nil, fmt.Errorf("sim: controller %s: %w", name, err)
	}
	if sc.Clients != nil {
		r.startClients()
	} else if t, ok := r.nextArrival(0); ok {
		r.schedule(t, evArrival, nil)
	}
	r.schedule(time.Second, evTick, nil)
	if err := r.loop(); err != nil {
		return nil, fmt.Errorf("sim: controller %s: %w", name, err)
	}
	if !r.finished {
		r.levels.advance(sc.Duration, r.inflight, r.gate.Limit(), r.backend.inflight)
		r.stats.End = sc.Duration
	}
	r.stats.summarize(sc.Backend.Base, &r.levels, r.done)
	res := &Result{Controller: name, Kind: kind, Rows: r.rows, LimitChanges: r.changes, Stats: r.stats, extended: sc.extended()}
	res.Phases = analyze(sc, r.stats.End, r.rows, r.done, r.drops, r.failed)
	return res, nil
}

// loop runs the events up to the scenario's duration, or to the first tick
// after a closed loop's work is delivered.
func (r *run) loop() error {
	for len(r.events) > 0 {
		e := r.pop()
		if e.at > r.sc.Duration {
			return nil
		}
		if !r.finished {
			r.levels.advance(e.at, r.inflight, r.gate.Limit(), r.backend.inflight)
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
			r.answer(e.req)
		case evTimeout:
			if e.req.queued {
				e.req.queued = false
				r.queued--
				r.cur.TimedOut++
				r.refuse(e.req)
			}
		case evGiveUp:
			r.giveUp(e.req)
		case evWake:
			r.wake(e.cl)
		case evTick:
			if err := r.tick(); err != nil {
				return err
			}
			if r.finished {
				return nil
			}
			if next := e.at + time.Second; next <= r.sc.Duration {
				r.schedule(next, evTick, nil)
			}
		}
	}
	return nil
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

// arrive handles one open-loop arrival.
func (r *run) arrive() {
	// Draw for every arrival, jittered or not, so that the i-th request's
	// multiplier does not depend on the controller.
	req := &request{arrive: r.now, jitter: r.sc.Backend.drawJitter(r.jitter)}
	r.cur.Arrived++
	r.stats.Requests++
	r.stats.Attempts++
	r.offer(req)
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
	row.Limit, row.Inflight, row.Queued, row.Backend = snap.Limit, r.inflight, r.queued, r.backend.inflight
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
	r.push(event{at: at, kind: k, req: req})
}

// push adds e to the heap, numbering it after every event before it.
func (r *run) push(e event) {
	r.seq++
	e.seq = r.seq
	r.events = append(r.events, e)
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

// before orders events by time; at one instant a tick comes last, since
// it closes the second that ends then, and the rest in scheduling order.
func (e event) before(o event) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	if (e.kind == evTick) != (o.kind == evTick) {
		return o.kind == evTick
	}
	return e.seq < o.seq
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
