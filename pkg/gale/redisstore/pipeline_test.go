package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
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
	srv := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, srv.Addr)
	// Nothing but the proxy's healing ends a round trip here.
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr, ReadTimeout: testenv.StoreDeadline, WriteTimeout: testenv.StoreDeadline})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Pipelines: 1, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := timeline()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Check(cancelled, "c", minute, 1, now); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if _, err := s.Check(ctx, "warm-up", minute, 1, now); err != nil { // the script cached
		t.Fatal(err)
	}
	// While the proxy holds Redis's replies, a caller's deadline ends its
	// wait; the round trip in flight goes on (the server runs it). A
	// request whose caller left before it was sent is never sent. Judged
	// by what happened, not by how long it took: the first check's round
	// trip has not ended (no operation failed) when the second one's
	// deadline has ended it, queued behind it.
	proxy.Blackhole("downstream")
	first := make(chan error, 1)
	go func() { _, err := s.Check(ctx, "c", minute, 1, now); first <- err }()
	if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool { return s.Stats().Ops == 2 }) { // sent, its reply held
		t.Fatalf("the first check was not sent: %+v", s.Stats())
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.Check(short, "c", minute, 1, now); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	if st := s.Stats(); st.Errors != 0 {
		t.Fatalf("stats %+v: the second check returned once the first's round trip had ended, not at its own deadline", st)
	}
	select {
	case err := <-first:
		t.Fatalf("the first check returned (%v) while its reply was held", err)
	default:
	}
	proxy.Heal() // drops the connection: the first check's reply is lost
	select {
	case <-first:
	case <-time.After(testenv.StoreDeadline):
		t.Fatalf("the first check still waiting %v after its connection dropped", testenv.StoreDeadline)
	}
	var d gale.Decision
	if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool { d, err = s.Check(ctx, "c", minute, 1, now); return err == nil }) {
		t.Fatalf("no check answered after the proxy healed: %v", err)
	}
	if d.Remaining != 98 {
		t.Fatalf("%+v: want 98 left, the first check run and the abandoned one not sent", d)
	}
	if st := s.Stats(); st.Ops != 3 {
		t.Fatalf("stats %+v, want 3 ops (the abandoned check not sent)", st)
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

// TestKilledServer: a dead Redis gives every check an error, not a panic
// or a hang, and the store works again once the server is back. The
// store's Timeout bounds each round trip whatever its callers' contexts
// (here none): judged by the deadline each round trip carried, set as it
// began, not by how long the checks took.
func TestKilledServer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := testenv.StartRedis(t)
	c := srv.Client()
	trips := &testenv.Sent{}
	c.AddHook(trips)
	s, err := redisstore.New(c, redisstore.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := timeline()
	// A round trip of 300ms is missed now and then on a loaded machine:
	// the checks before the kill and after the restart, which the test
	// does not time, ask again until one is answered.
	answered := func() (gale.Decision, int) {
		t.Helper()
		var d gale.Decision
		var err error
		failed := -1
		if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool {
			failed++
			d, err = s.Check(ctx, "k", minute, 1, now)
			return err == nil
		}) {
			t.Fatalf("no check answered in %v: %v", testenv.StoreDeadline, err)
		}
		return d, failed
	}
	answered()
	srv.Kill()
	trips.Take("")
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() { _, err := s.Check(ctx, "k", minute, 1, now); errs <- err }()
	}
	for i := 0; i < 8; i++ {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("check against a dead server succeeded")
			}
		case <-time.After(testenv.StoreDeadline):
			t.Fatalf("%d of 8 checks against a dead server still waiting after %v", 8-i, testenv.StoreDeadline)
		}
	}
	sentDead := trips.Take("")
	if len(sentDead) == 0 {
		t.Fatal("8 checks against a dead server sent no command")
	}
	for _, c := range sentDead {
		if c.Deadline.IsZero() || c.Deadline.Sub(c.Began) > timeout {
			t.Fatalf("%s was sent with a deadline %v after it began (zero: none); want at most the store's %v", c.Args[0], c.Deadline.Sub(c.Began), timeout)
		}
	}
	srv.Restart()
	d, failed := answered()
	t.Logf("working again after %d failed checks after the restart", failed)
	// A new, empty server: it counted this check, and any failed one
	// it ran after its caller had given up.
	if d.Remaining > 99 || d.Remaining < int64(99-failed) {
		t.Fatalf("after restart: %+v, want %d..99 left", d, 99-failed)
	}
	if st := s.Stats(); st.Errors < 8 {
		t.Fatalf("stats %+v", st)
	}
}
