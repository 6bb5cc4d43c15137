package adaptive

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// scripted is a Controller whose limit the test sets: each Observe applies
// the next scripted limit, if any.
type scripted struct {
	limit int
	next  []int
}

func (s *scripted) Observe(time.Time, Sample) int {
	if len(s.next) > 0 {
		s.limit, s.next = s.next[0], s.next[1:]
	}
	return s.limit
}
func (s *scripted) Limit() int   { return s.limit }
func (s *scripted) Name() string { return "scripted" }

func newGate(t testing.TB, c GateConfig) *Gate {
	t.Helper()
	g, err := NewGate(c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// waitCtx bounds a test's waits on goroutines it started.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Kata test 4: at limit 3, 50 concurrent callers never have more than 3
// running, whichever controller drives the gate.
func TestGateHardCap(t *testing.T) {
	for _, tc := range controllers {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			g := newGate(t, GateConfig{Controller: tc.make(t, 1, 3, 3), MaxQueue: 50, Clock: clk})
			var running, peak atomic.Int32
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					l, err := g.Acquire(context.Background(), clk.Now())
					if err != nil {
						t.Error(err)
						return
					}
					n := running.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					if n > 3 {
						t.Errorf("%d running", n)
					}
					runtime.Gosched()
					running.Add(-1)
					l.Release(clk.Now(), OK)
				})
			}
			wg.Wait()
			s := g.Snapshot()
			if peak.Load() > 3 || s.Allowed != 50 || s.Inflight != 0 || s.Queued != 0 {
				t.Fatalf("peak %d, snapshot %+v", peak.Load(), s)
			}
		})
	}
}

// Kata test 5: limit 1, one queue place, 20ms queue timeout. Job 1 holds the
// slot for 100ms; job 2 queues and times out without ever running; job 3
// finds the queue full.
func TestGateQueueTimeout(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		clk := clock.NewFake(t0)
		ctrl := must(NewP95(kataP95(1, 1, 1)))
		g := newGate(t, GateConfig{Controller: ctrl, MaxQueue: 1, QueueTimeout: 20 * time.Millisecond, Clock: clk})
		job1, ok := g.TryAcquire(clk.Now())
		if !ok {
			t.Fatal("job 1 rejected")
		}
		job2 := make(chan error, 1)
		go func() {
			l, err := g.Acquire(context.Background(), clk.Now())
			if err == nil {
				l.Release(clk.Now(), OK)
				err = errors.New("job 2 ran")
			}
			job2 <- err
		}()
		if err := clk.WaitForWaiters(waitCtx(t), 1); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Acquire(context.Background(), clk.Now()); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("job 3: %v, want ErrQueueFull", err)
		}
		if lazy {
			// Time jumps past job 2's deadline and job 1 ends before job 2's
			// goroutine has seen its timer: job 2 must still not run.
			clk.Advance(100 * time.Millisecond)
			job1.Release(clk.Now(), OK)
		} else {
			clk.Advance(20 * time.Millisecond)
		}
		if err := <-job2; !errors.Is(err, ErrQueueTimeout) {
			t.Fatalf("lazy=%v: job 2: %v, want ErrQueueTimeout", lazy, err)
		}
		if !lazy {
			clk.Advance(80 * time.Millisecond)
			job1.Release(clk.Now(), OK)
		}
		s := g.Snapshot()
		if s.Allowed != 1 || s.TimedOutInQueue != 1 || s.RejectedQueueFull != 1 || s.Rejected != 1 || s.Inflight != 0 || s.Queued != 0 {
			t.Fatalf("lazy=%v: snapshot %+v", lazy, s)
		}
	}
}

// queueUp starts n Acquire calls one after another, each queued before the
// next starts (each arms its queue timer), and returns the channel their ids
// arrive on, in admission order, with their leases.
func queueUp(t *testing.T, g *Gate, clk *clock.Fake, n int) <-chan admitted {
	out := make(chan admitted, n)
	for i := range n {
		go func() {
			l, err := g.Acquire(context.Background(), clk.Now())
			if err != nil {
				t.Error(err)
			}
			out <- admitted{i, l}
		}()
		if err := clk.WaitForWaiters(waitCtx(t), i+1); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

type admitted struct {
	id    int
	lease Lease
}

func TestGateQueueOrder(t *testing.T) {
	for _, tc := range []struct {
		lifo bool
		want []int
	}{{false, []int{0, 1, 2, 3}}, {true, []int{3, 2, 1, 0}}} {
		clk := clock.NewFake(t0)
		g := newGate(t, GateConfig{Controller: &scripted{limit: 1}, MaxQueue: 4, QueueTimeout: time.Hour, LIFO: tc.lifo, Clock: clk})
		holder, _ := g.TryAcquire(clk.Now())
		out := queueUp(t, g, clk, 4)
		holder.Release(clk.Now(), OK)
		var order []int
		for range 4 {
			a := <-out
			order = append(order, a.id)
			a.lease.Release(clk.Now(), OK)
		}
		if !slices.Equal(order, tc.want) {
			t.Fatalf("lifo=%v: order %v, want %v", tc.lifo, order, tc.want)
		}
	}
}

func TestGateCancelWhileQueued(t *testing.T) {
	clk := clock.NewFake(t0)
	g := newGate(t, GateConfig{Controller: &scripted{limit: 1}, MaxQueue: 2, QueueTimeout: time.Hour, Clock: clk})
	holder, _ := g.TryAcquire(clk.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.Acquire(ctx, clk.Now())
		done <- err
	}()
	if err := clk.WaitForWaiters(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	cancel() // no time passes: the request leaves at once
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	if s := g.Snapshot(); s.Queued != 0 || s.Cancelled != 1 {
		t.Fatalf("after cancel: %+v", s)
	}
	holder.Release(clk.Now(), OK)
	if s := g.Snapshot(); s.Inflight != 0 || s.Allowed != 1 {
		t.Fatalf("the cancelled request ran: %+v", s)
	}
	// An ended context admits nothing, even with room.
	if _, err := g.Acquire(ctx, clk.Now()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on an ended context: %v", err)
	}
	if s := g.Snapshot(); s.Inflight != 0 || s.Cancelled != 2 {
		t.Fatalf("after a dead-context Acquire: %+v", s)
	}
}

// A cancellation that loses the race with an admission gives the slot back,
// to the next waiter.
func TestGateCancelAfterAdmissionHandsTheSlotOn(t *testing.T) {
	g := newGate(t, GateConfig{Controller: &scripted{limit: 1}, MaxQueue: 2})
	holder, _ := g.TryAcquire(t0)
	w1, _, _ := g.enqueue(t0)
	w2, _, _ := g.enqueue(t0)
	holder.Release(t0.Add(time.Millisecond), OK) // admits w1 under the lock
	if l, err := g.abandon(w1, waitCancelled, context.Canceled); err != context.Canceled || l != (Lease{}) {
		t.Fatalf("abandon: %v %v", l, err)
	}
	if w2.state != waitAdmitted || g.Snapshot().Inflight != 1 {
		t.Fatalf("w2 %v, snapshot %+v", w2.state, g.Snapshot())
	}
}

func TestGateNoQueue(t *testing.T) {
	g := newGate(t, GateConfig{Controller: &scripted{limit: 1}})
	g.TryAcquire(t0)
	if _, err := g.Acquire(context.Background(), t0); !errors.Is(err, ErrLimit) {
		t.Fatalf("Acquire at the limit without a queue: %v, want ErrLimit", err)
	}
	if _, ok := g.TryAcquire(t0); ok {
		t.Fatal("TryAcquire admitted at the limit")
	}
	if s := g.Snapshot(); s.Rejected != 2 || s.RejectedQueueFull != 0 {
		t.Fatalf("%+v", s)
	}
}

func TestLeaseReleaseIsIdempotent(t *testing.T) {
	g := newGate(t, GateConfig{Controller: &scripted{limit: 2}})
	a, _ := g.TryAcquire(t0)
	stale := a
	a.Release(t0.Add(time.Millisecond), OK)
	a.Release(t0.Add(time.Millisecond), OK) // double release
	b, _ := g.TryAcquire(t0)                // reuses a's slot
	if b.s != a.s {
		t.Fatal("slot not recycled")
	}
	stale.Release(t0.Add(time.Millisecond), OK) // a stale copy must not free b
	if s := g.Snapshot(); s.Inflight != 1 || s.Samples != 1 {
		t.Fatalf("after stale releases: %+v", s)
	}
	b.Release(t0.Add(2*time.Millisecond), Error)
	Lease{}.Release(t0, OK) // the zero lease
	if s := g.Snapshot(); s.Inflight != 0 || s.Samples != 2 || s.ErrorRate != 0.5 || s.P95 != 2*time.Millisecond {
		t.Fatalf("%+v", s)
	}
}

// Limit changes: events are delivered; a rise admits waiters at once; a
// fall below inflight admits nothing until inflight is under it.
func TestGateLimitChanges(t *testing.T) {
	type change struct{ old, new int }
	var events []change
	ctrl := &scripted{limit: 1, next: []int{3, 3, 1, 1, 1}}
	var g *Gate
	g = newGate(t, GateConfig{Controller: ctrl, MaxQueue: 5, OnLimitChange: func(o, n int) {
		events = append(events, change{o, n})
		_ = g.Snapshot() // allowed: the lock is not held
	}})
	a, _ := g.TryAcquire(t0)
	w := make([]*waiter, 3)
	for i := range w {
		w[i], _, _ = g.enqueue(t0)
	}
	a.Release(t0, OK) // limit 1 → 3: three admitted
	if s := g.Snapshot(); s.Inflight != 3 || s.Queued != 0 || s.Limit != 3 {
		t.Fatalf("after the rise: %+v", s)
	}
	w[0].lease.Release(t0, OK) // limit 3: w frees, nothing waits
	extra, _ := g.TryAcquire(t0)
	w[1].lease.Release(t0, OK) // limit 3 → 1 with 2 still in flight
	if _, ok := g.TryAcquire(t0); ok {
		t.Fatal("admitted above a lowered limit")
	}
	if s := g.Snapshot(); s.Inflight != 2 || s.Limit != 1 || s.AdjustedUp != 1 || s.AdjustedDown != 1 {
		t.Fatalf("after the fall: %+v", s)
	}
	w[2].lease.Release(t0, OK) // 1 in flight, limit 1: still full
	if _, ok := g.TryAcquire(t0); ok {
		t.Fatal("admitted at the limit")
	}
	extra.Release(t0, OK)
	if _, ok := g.TryAcquire(t0); !ok {
		t.Fatal("rejected under the limit")
	}
	if want := []change{{1, 3}, {3, 1}}; !slices.Equal(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}

func TestGateRejectionAllocatesNothing(t *testing.T) {
	g := newGate(t, GateConfig{Controller: &scripted{limit: 1}})
	g.TryAcquire(t0)
	if n := testing.AllocsPerRun(100, func() { g.TryAcquire(t0) }); n != 0 {
		t.Fatalf("%v allocations per rejection", n)
	}
	if n := testing.AllocsPerRun(100, func() { g.Acquire(context.Background(), t0) }); n != 0 {
		t.Fatalf("%v allocations per ErrLimit", n)
	}
}

func TestGateConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		c    GateConfig
		want string
	}{
		{GateConfig{}, "Controller is nil"},
		{GateConfig{Controller: &scripted{limit: 1}, MaxQueue: -1}, "MaxQueue -1"},
		{GateConfig{Controller: &scripted{limit: 1}, QueueTimeout: -1}, "QueueTimeout -1ns"},
		{GateConfig{Controller: &scripted{limit: 1}, StatsWindow: -1}, "StatsWindow -1"},
	} {
		if _, err := NewGate(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewGate(%+v): %v, want %q", tc.c, err, tc.want)
		}
	}
}
