package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestNoScript: after SCRIPT FLUSH the store falls back to EVAL (which caches
// the script again) and carries on, for single operations and batches.
func TestNoScript(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{})
	c := srv.Client()
	now := timeline()
	check := func(want int64) {
		t.Helper()
		d, err := s.Check(ctx, "ns", minute, 1, now)
		if err != nil || d.Remaining != want {
			t.Fatalf("check: %+v, %v; want remaining %d", d, err, want)
		}
	}
	check(99)
	check(98)
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	check(97)
	check(96)
	calls, err := srv.CommandCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// evalsha: 2 failed on first use, 1 after the flush, 1 cached.
	if calls["evalsha"] != 4 || calls["eval"] != 2 {
		t.Fatalf("command calls %v, want evalsha 4, eval 2", calls)
	}
	for _, o := range []func() error{
		func() error { _, err := s.Lease(ctx, "ns", minute, 1, 1, now); return err },
		func() error { return s.Return(ctx, "ns", minute, 1, now.Truncate(time.Minute).Add(time.Minute), now) },
	} {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := o(); err != nil {
			t.Fatal(err)
		}
	}
	check(95)
	// A batch: many concurrent callers after a flush.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Check(ctx, "ns", minute, 1, now); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	check(54)
	if st := s.Stats(); st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestConcurrentStrictChecks: 64 goroutines race for one key; exactly Limit
// checks are admitted, and round trips are shared.
func TestConcurrentStrictChecks(t *testing.T) {
	s, _ := newStore(t, redisstore.Options{})
	r := gale.Rule{Algorithm: gale.SlidingWindow, Limit: 500, Period: time.Hour}
	now := timeline()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				d, err := s.Check(ctx, "hot", r, 1, now)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 500 {
		t.Fatalf("admitted %d of 1280, want 500", got)
	}
	st := s.Stats()
	if st.Ops != 1280 || st.Errors != 0 || st.RoundTrips >= st.Ops {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("%d ops in %d round trips", st.Ops, st.RoundTrips)
}

// TestErrorsGoToTheirCaller: a failing operation in a batch fails only its
// own caller, with the operation and key in the error.
func TestErrorsGoToTheirCaller(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{Pipelines: 1})
	c := srv.Client()
	if err := c.Set(ctx, s.Key("string"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, s.Key("corrupt"), "w", "0", "x", "soon").Err(); err != nil {
		t.Fatal(err)
	}
	now := timeline()
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		key := []string{"string", "corrupt", "good"}[i%3]
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Check(ctx, key, minute, 1, now)
			switch {
			case key == "good" && err != nil:
				t.Errorf("good key: %v", err)
			case key == "string" && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), `check "string"`)):
				t.Errorf("string key: %v", err)
			case key == "corrupt" && (err == nil || !strings.Contains(err.Error(), "is not a number")):
				t.Errorf("corrupt key: %v", err)
			}
		}()
	}
	wg.Wait()
	if st := s.Stats(); st.Errors != 40 {
		t.Fatalf("stats %+v, want 40 errors", st)
	}
}

// TestContext: a caller's context ends its wait, and work whose caller has
// gone is not sent.
func TestContext(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{Pipelines: 1})
	c := srv.Client()
	now := timeline()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Check(cancelled, "c", minute, 1, now); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	// While Redis is paused, a caller's deadline ends its wait; the store's
	// round trip goes on. A request whose caller left before it was sent
	// is never sent.
	if err := c.Do(ctx, "CLIENT", "PAUSE", 300, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { _, err := s.Check(ctx, "c", minute, 1, now); first <- err }()
	waitUntil(t, func() bool { return s.Stats().Ops == 1 }) // sent, and held by the pause
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Check(short, "c", minute, 1, now); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if waited := time.Since(start); waited > 200*time.Millisecond {
		t.Fatalf("waited %v past a 20ms deadline", waited)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	d, err := s.Check(ctx, "c", minute, 1, now)
	if err != nil || d.Remaining != 98 {
		t.Fatalf("%+v, %v: the abandoned check was sent", d, err)
	}
	if st := s.Stats(); st.Ops != 2 {
		t.Fatalf("stats %+v, want 2 ops", st)
	}
}

// TestClose: operations after Close return ErrClosed; Close is idempotent.
func TestClose(t *testing.T) {
	s, _ := newStore(t, redisstore.Options{})
	if _, err := s.Check(ctx, "k", minute, 1, timeline()); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	_ = s.Close()
	if _, err := s.Check(ctx, "k", minute, 1, timeline()); !errors.Is(err, redisstore.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestKilledServer: a dead Redis gives errors within the store's timeout, not
// panics or hangs, and the store works again once the server is back.
func TestKilledServer(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{Timeout: 300 * time.Millisecond})
	now := timeline()
	if _, err := s.Check(ctx, "k", minute, 1, now); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Check(ctx, "k", minute, 1, now); err == nil {
				t.Error("check against a dead server succeeded")
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if took > 2*time.Second {
		t.Fatalf("errors took %v with a 300ms timeout", took)
	}
	t.Logf("8 checks against a dead server failed in %v", took)
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for attempt := 1; ; attempt++ {
		d, err := s.Check(ctx, "k", minute, 1, now)
		if err == nil {
			if d.Remaining != 99 { // a new, empty server
				t.Fatalf("after restart: %+v", d)
			}
			t.Logf("working again at attempt %d after the restart", attempt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store not working 5s after restart: %v", err)
		}
	}
	if st := s.Stats(); st.Errors < 8 {
		t.Fatalf("stats %+v", st)
	}
}

// waitUntil polls cond, which a concurrent goroutine makes true, for up to 5s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
	}
}
