package clock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeTimerFiresOnAdvance(t *testing.T) {
	c := clock.NewFake(t0)
	tm := c.NewTimer(10 * time.Second)
	c.Advance(9 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("timer fired early")
	default:
	}
	c.Advance(time.Second)
	select {
	case got := <-tm.C():
		if !got.Equal(t0.Add(10 * time.Second)) {
			t.Fatalf("fired at %v, want %v", got, t0.Add(10*time.Second))
		}
	default:
		t.Fatal("timer did not fire")
	}
	if c.Waiters() != 0 {
		t.Fatalf("fired timer still armed")
	}
}

func TestFakeStopAndReset(t *testing.T) {
	c := clock.NewFake(t0)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported inactive")
	}
	c.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported active")
	}
	c.Advance(time.Second)
	if _, ok := <-tm.C(); !ok {
		t.Fatal("reset timer did not fire")
	}
}

func TestFakeTickerAndAfterFunc(t *testing.T) {
	c := clock.NewFake(t0)
	tk := c.NewTicker(time.Second)
	defer tk.Stop()
	var n atomic.Int32
	done := make(chan struct{})
	c.AfterFunc(2500*time.Millisecond, func() { n.Add(1); close(done) })
	for i := 1; i <= 3; i++ {
		c.Advance(time.Second)
		got := <-tk.C()
		if want := t0.Add(time.Duration(i) * time.Second); !got.Equal(want) {
			t.Fatalf("tick %d at %v, want %v", i, got, want)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	if n.Load() != 1 {
		t.Fatalf("AfterFunc ran %d times", n.Load())
	}
}

func TestFakeWaitForWaiters(t *testing.T) {
	c := clock.NewFake(t0)
	got := make(chan time.Time)
	go func() {
		tm := c.NewTimer(time.Minute)
		got <- <-tm.C()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if v := <-got; !v.Equal(t0.Add(time.Minute)) {
		t.Fatalf("got %v", v)
	}
}
