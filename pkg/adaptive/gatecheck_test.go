package adaptive

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// runGateOps decodes data into a gate configuration and a sequence of
// operations, runs them on one goroutine against the gate's core (the
// waiting part of Acquire is modelled: a queued request may be woken, time
// out or be cancelled at any step), and checks after every step the gate's
// invariants and a naive model of who holds a slot.
func runGateOps(t *testing.T, data []byte) {
	if len(data) < 3 {
		return
	}
	maxL := 1 + int(data[0]%6)
	ctrl := &dial{min: 1, max: maxL, limit: 1 + int(data[1])%maxL}
	clk := clock.NewFake(t0)
	g, err := NewGate(GateConfig{
		Controller:   ctrl,
		MaxQueue:     int(data[2] % 4),
		QueueTimeout: time.Duration(data[2]>>2%4) * 10 * time.Millisecond,
		LIFO:         data[2]&0x40 != 0,
		Clock:        clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	var (
		live    []Lease   // leases the callers hold
		stale   []Lease   // copies of released leases
		pending []*waiter // queued, or woken but not yet observed by their caller
		gone    []*waiter // timed out or cancelled: must stay so
	)
	take := func(i byte, n int) int { return int(i) % n }
	ops := data[3:]
	for k := 0; k+1 < len(ops); k += 2 {
		op, arg := ops[k]%9, ops[k+1]
		now := clk.Now()
		before := g.snapshotCore()
		switch op {
		case 0: // TryAcquire
			if l, ok := g.TryAcquire(now); ok {
				live = append(live, l)
			} else if before.inflight < before.limit {
				t.Fatalf("step %d: TryAcquire rejected at %d/%d", k, before.inflight, before.limit)
			}
		case 1: // Acquire, up to the wait
			w, l, err := g.enqueue(now)
			switch {
			case w != nil:
				pending = append(pending, w)
			case err == nil:
				live = append(live, l)
			case errors.Is(err, ErrLimit) != (g.maxQueue == 0):
				t.Fatalf("step %d: %v with MaxQueue %d", k, err, g.maxQueue)
			}
		case 2: // Release
			if len(live) > 0 {
				i := take(arg, len(live))
				live[i].Release(now, Outcome(arg%4))
				stale = append(stale, live[i])
				live = append(live[:i], live[i+1:]...)
			}
		case 3: // Release a stale copy: must change nothing
			if len(stale) > 0 {
				stale[take(arg, len(stale))].Release(now, OK)
				if after := g.snapshotCore(); after != before {
					t.Fatalf("step %d: stale release changed %+v to %+v", k, before, after)
				}
			}
		case 4, 5: // the waiter's context ends, or its timer fires
			if len(pending) > 0 {
				i := take(arg, len(pending))
				w := pending[i]
				pending = append(pending[:i], pending[i+1:]...)
				why, ctxErr := waitTimedOut, error(nil)
				if op == 4 {
					why, ctxErr = waitCancelled, context.Canceled
				}
				l, err := g.abandon(w, why, ctxErr)
				switch {
				case err == nil && op == 4:
					t.Fatalf("step %d: a cancelled wait returned a lease", k)
				case err == nil:
					live = append(live, l)
				default:
					gone = append(gone, w)
				}
			}
		case 6: // a woken waiter's caller returns
			for i, w := range pending {
				if w.state != waitQueued {
					pending = append(pending[:i], pending[i+1:]...)
					if l, err := w.result(); err == nil {
						live = append(live, l)
					} else {
						gone = append(gone, w)
					}
					break
				}
			}
		case 7: // time passes
			clk.Advance(time.Duration(arg%32) * time.Millisecond)
		case 8: // the controller will answer a new limit on the next release
			ctrl.next = ctrl.min + int(arg)%(ctrl.max-ctrl.min+1)
		}
		checkGate(t, k, g, ctrl, before, live, pending, gone)
	}
}

// dial is a Controller whose next answer the test sets.
type dial struct{ min, max, limit, next int }

func (d *dial) Observe(time.Time, Sample) int {
	if d.next != 0 {
		d.limit, d.next = d.next, 0
	}
	return d.limit
}
func (d *dial) Limit() int   { return d.limit }
func (d *dial) Name() string { return "dial" }

// core is the part of a gate's state the invariants speak of.
type core struct {
	limit, inflight, queued int
	allowed                 int64
}

func (g *Gate) snapshotCore() core {
	g.mu.Lock()
	defer g.mu.Unlock()
	return core{g.limit, g.inflight, g.queue.len, g.n.allowed}
}

func checkGate(t *testing.T, step int, g *Gate, ctrl *dial, before core, live []Lease, pending, gone []*waiter) {
	t.Helper()
	now := g.snapshotCore()
	s := g.Snapshot()
	held, queued := len(live), 0
	for _, w := range pending {
		switch w.state {
		case waitAdmitted:
			held++
			if !w.deadline.IsZero() && !w.lease.s.start.Before(w.deadline) {
				t.Fatalf("step %d: admitted at %v, after its deadline %v", step, w.lease.s.start, w.deadline)
			}
		case waitQueued:
			queued++
		}
	}
	for _, w := range gone {
		if w.state == waitAdmitted && w.lease != (Lease{}) {
			t.Fatalf("step %d: a timed-out or cancelled request holds a slot", step)
		}
	}
	switch {
	case now.inflight != held || s.Inflight != held:
		t.Fatalf("step %d: inflight %d, but %d requests hold slots", step, now.inflight, held)
	case now.queued != queued || now.queued > g.maxQueue:
		t.Fatalf("step %d: queued %d, model %d, MaxQueue %d", step, now.queued, queued, g.maxQueue)
	case now.limit < ctrl.min || now.limit > ctrl.max:
		t.Fatalf("step %d: limit %d outside [%d, %d]", step, now.limit, ctrl.min, ctrl.max)
	case now.inflight < 0:
		t.Fatalf("step %d: inflight %d", step, now.inflight)
	case g.Limit() != now.limit || s.Limit != now.limit:
		t.Fatalf("step %d: Limit() %d, Snapshot().Limit %d, limit %d", step, g.Limit(), s.Limit, now.limit)
	case now.queued > 0 && now.inflight < now.limit:
		t.Fatalf("step %d: %d queued with a free slot (%d/%d)", step, now.queued, now.inflight, now.limit)
	case now.inflight > now.limit && (now.inflight > before.inflight || now.allowed > before.allowed):
		t.Fatalf("step %d: admitted above the limit: %d/%d (was %d)", step, now.inflight, now.limit, before.inflight)
	}
}

// The gate property: random operation sequences keep the invariants.
func TestGateRandomOperations(t *testing.T) {
	r := rand.New(rand.NewPCG(2027, 47))
	for range 2000 {
		data := make([]byte, 3+2*r.IntN(200))
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		runGateOps(t, data)
	}
}

func FuzzGate(f *testing.F) {
	f.Add([]byte{3, 0, 0x07, 0, 0, 1, 0, 1, 0, 8, 2, 2, 0, 6, 0, 7, 30, 5, 0, 3, 0})
	f.Add([]byte{5, 2, 0x43, 0, 0, 0, 0, 1, 0, 1, 1, 1, 2, 8, 4, 2, 0, 4, 1, 6, 0, 2, 1, 3, 1})
	f.Add([]byte{0, 0, 0x01, 1, 0, 1, 0, 7, 15, 2, 0, 5, 0})
	f.Fuzz(runGateOps)
}

// The controller property: random samples keep every controller's limit in
// [MinLimit, MaxLimit], and Observe's answer is Limit.
func TestControllersStayInBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 2027))
	outcomes := []Outcome{OK, OK, OK, Error, Timeout, Dropped}
	for i := range 400 {
		minL := 1 + r.IntN(10)
		maxL := minL + r.IntN(50)
		init := minL + r.IntN(maxL-minL+1)
		recal := Recalibration{}
		if r.IntN(2) == 0 {
			recal = Recalibration{Interval: time.Duration(1+r.IntN(1000)) * time.Millisecond, RequestCount: 1 + r.IntN(10), Limit: minL}
		}
		for _, c := range []Controller{
			must(NewGradient2(Gradient2Config{MinLimit: minL, MaxLimit: maxL, InitialLimit: init, RTTWindow: 1 + r.IntN(50), Smoothing: r.Float64() + 1e-3, MinUtilization: r.Float64() - 0.5, Recalibration: recal})),
			must(NewAIMD(AIMDConfig{MinLimit: minL, MaxLimit: maxL, InitialLimit: init, Increase: r.IntN(5), Backoff: 0.05 + 0.9*r.Float64(), Timeout: time.Duration(1+r.IntN(500)) * time.Millisecond})),
			must(NewP95(P95Config{MinLimit: minL, MaxLimit: maxL, InitialLimit: init, Target: time.Duration(1+r.IntN(200)) * time.Millisecond, Signal: Signal(r.IntN(2)), IncreaseStep: r.IntN(10), MaxDecreaseStep: r.IntN(5), MinSamples: 1 + r.IntN(10), MaxSamples: 10 + r.IntN(20), TickInterval: time.Duration(1+r.IntN(50)) * time.Millisecond, Cooldown: time.Duration(r.IntN(100)) * time.Millisecond, MaxErrorRate: r.Float64() / 2})),
			must(NewVegas(VegasConfig{MinLimit: minL, MaxLimit: maxL, InitialLimit: init, RTTWindow: 1 + r.IntN(50), Recalibration: recal})),
		} {
			now := t0
			for j := range 300 {
				now = now.Add(time.Duration(r.IntN(20)) * time.Millisecond)
				s := Sample{Start: now.Add(-time.Duration(r.IntN(1000)) * time.Millisecond), RTT: time.Duration(r.Int64N(int64(time.Second))), Inflight: r.IntN(2 * maxL), Outcome: outcomes[r.IntN(len(outcomes))]}
				if got := c.Observe(now, s); got < minL || got > maxL || got != c.Limit() {
					t.Fatalf("case %d %s sample %d: limit %d (Limit %d) outside [%d, %d]", i, c.Name(), j, got, c.Limit(), minL, maxL)
				}
			}
		}
	}
}
