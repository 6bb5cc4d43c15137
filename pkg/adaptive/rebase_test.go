package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// Gate.Rebase moves a Rebaser's limit within its bounds; a raise admits a
// waiter at once (the queue's invariant: a free slot never idles while a
// request waits); a controller that is not a Rebaser is left alone.
func TestGateRebase(t *testing.T) {
	clk := clock.NewFake(t0)
	ctrl := must(NewAIMD(AIMDConfig{MinLimit: 1, InitialLimit: 1, MaxLimit: 50}))
	g := newGate(t, GateConfig{Controller: ctrl, MaxQueue: 1, QueueTimeout: time.Minute, Clock: clk})
	held, ok := g.TryAcquire(clk.Now())
	if !ok {
		t.Fatal("first request refused")
	}
	defer held.Release(clk.Now(), OK)
	admitted := make(chan error, 1)
	go func() {
		l, err := g.Acquire(context.Background(), clk.Now())
		if err == nil {
			l.Release(clk.Now(), OK)
		}
		admitted <- err
	}()
	if err := clk.WaitForWaiters(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if l, ok := g.Rebase(clk.Now(), 80); !ok || l != 50 {
		t.Fatalf("Rebase(80) = %d, %v; want the bound, 50, true", l, ok)
	}
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatalf("the waiter after the raise: %v, want admitted", err)
		}
	case <-waitCtx(t).Done():
		t.Fatal("the waiter was not admitted after the raise")
	}
	if l, _ := g.Rebase(clk.Now(), 0); l != 1 || g.Level() != 1 {
		t.Fatalf("Rebase(0): limit %d, level %d; want the floor, 1", l, g.Level())
	}
	other := newGate(t, GateConfig{Controller: &scripted{limit: 7}})
	if l, ok := other.Rebase(clk.Now(), 3); ok || l != 7 || other.Level() != 7 {
		t.Fatalf("Rebase of a controller that is not a Rebaser: %d, %v (level %d); want 7, false, 7", l, ok, other.Level())
	}
}
