package gale_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// newRedisStore starts a redis-server for tb and returns a store on it,
// whose round trips a loaded machine cannot time out (StoreDeadline).
func newRedisStore(tb testing.TB) (*redisstore.Store, *testenv.Redis) {
	tb.Helper()
	srv := testenv.StartRedis(tb)
	s, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, srv
}

// scriptCalls is how many scripts Redis itself has run.
func scriptCalls(t *testing.T, srv *testenv.Redis) int64 {
	t.Helper()
	calls, err := srv.CommandCalls(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return calls["evalsha"] + calls["eval"]
}

// TestFleetBoundsRedis: seed 04's bounds with N independent limiters (each its
// own L1) sharing one real Redis.
func TestFleetBoundsRedis(t *testing.T) {
	s, _ := newRedisStore(t)
	fleetBounds(t, s, storetest.Timeline())
}

// TestCoalescingRedis: 1,000 concurrent misses on one cold key make Redis run
// exactly one script.
func TestCoalescingRedis(t *testing.T) {
	s, srv := newRedisStore(t)
	counted := &countingStore{Store: s}
	l := newLimiter(t, counted, gale.Config{Rule: perMinute(5000), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 1000}})
	now := storetest.Timeline()
	// A fresh server has no scripts cached: the first EVALSHA answers
	// NOSCRIPT and an EVAL follows. Warm the lease script on another key.
	if _, err := s.Lease(bg, "warm-up", perMinute(5000), 1, 1, now); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, srv)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	startLine := make(chan struct{})
	for i := 0; i < 1000; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startLine
			if d, err := l.Check(bg, "cold", 1, now); err == nil && d.Allowed {
				admitted.Add(1)
			}
		}()
	}
	close(startLine)
	wg.Wait()
	if admitted.Load() != 1000 {
		t.Fatalf("admitted %d of 1000", admitted.Load())
	}
	if got := scriptCalls(t, srv) - before; got != 1 {
		t.Fatalf("Redis ran %d scripts for 1,000 concurrent misses, want 1", got)
	}
	if got := counted.maxInflight.Load(); got != 1 {
		t.Fatalf("%d leases in flight at once", got)
	}
}

// TestCachedDenyRedis: once a key is over its limit, 10,000 further checks
// make Redis run nothing until the retry-after has passed.
func TestCachedDenyRedis(t *testing.T) {
	s, srv := newRedisStore(t)
	l := newLimiter(t, s, gale.Config{Rule: perMinute(3), Mode: gale.CachedDeny})
	now := storetest.Timeline().Add(15 * time.Second)
	for i := 0; i < 4; i++ {
		mustCheck(t, l, "abuser", 1, now)
	}
	before := scriptCalls(t, srv)
	var last gale.Decision
	for i := 0; i < 10000; i++ {
		last = mustCheck(t, l, "abuser", 1, now.Add(time.Duration(i)*time.Millisecond))
		if last.Allowed {
			t.Fatalf("check %d admitted", i)
		}
	}
	if got := scriptCalls(t, srv) - before; got != 0 {
		t.Fatalf("10,000 checks on a blocked key ran %d scripts in Redis, want 0", got)
	}
	if d := mustCheck(t, l, "abuser", 1, now.Add(45*time.Second)); !d.Allowed || scriptCalls(t, srv)-before != 1 {
		t.Fatalf("after retry-after: %+v", d)
	}
}

// BenchmarkStrictRedis: strict mode against a real Redis at 1, 16 and 64
// concurrent callers, reporting Redis round trips per check.
func BenchmarkStrictRedis(b *testing.B) {
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			s, _ := newRedisStore(b)
			l := newLimiter(b, s, gale.Config{Rule: hugeRule, StoreTimeout: 10 * time.Second})
			now := storetest.Timeline()
			before := s.Stats()
			var keys atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(max(1, callers/2)) // GOMAXPROCS=2 on the reference machine
			if callers == 1 {
				for b.Loop() {
					if _, err := l.Check(bg, "k0", 1, now); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.RunParallel(func(pb *testing.PB) {
					key := fmt.Sprintf("k%d", keys.Add(1))
					for pb.Next() {
						if _, err := l.Check(bg, key, 1, now); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			after := s.Stats()
			b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/float64(after.Ops-before.Ops), "rtt/check")
		})
	}
}

// TestRedisDownFollowsPolicyAndRecovers: with Redis unreachable (a proxy
// holding every request) and then killed, each check is answered by its
// OnStoreError policy with the store's error, after one store call whose
// deadline that check set: its StoreTimeout from when it began, or its
// request's store budget (WithStoreBudget) when that is sooner. Once Redis
// answers again, and once it is back after the kill, checks are decided by
// it. Judged by what each store call saw and how it ended, not by the wall
// clock: a held call can end only at its deadline, so a check that returned
// was bounded by the deadline the test read.
func TestRedisDownFollowsPolicyAndRecovers(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr})
	t.Cleanup(func() { _ = c.Close() })
	// The store's own bound on a round trip is not what the test is about:
	// the limiters' deadlines are.
	s, err := redisstore.New(c, redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := &deadlineStore{Store: s}
	const timeout = 50 * time.Millisecond
	closed := newLimiter(t, rec, gale.Config{Rule: perMinute(100), OnStoreError: gale.FailClosed, StoreTimeout: timeout})
	open := newLimiter(t, rec, gale.Config{Rule: perMinute(100), Mode: gale.Leased, OnStoreError: gale.FailOpen, StoreTimeout: timeout})
	failing := newLimiter(t, rec, gale.Config{Rule: perMinute(100), OnStoreError: gale.FailError, StoreTimeout: timeout})
	now := storetest.Timeline()

	// decided checks k on closed until Redis decides, and returns that
	// decision. A check on a live server can miss the 50ms a loaded machine
	// leaves it (a new connection, a script loaded) and be answered by the
	// policy; what must hold is that Redis decides, so it asks again, saying
	// how often it fell back.
	decided := func(what string) gale.Decision {
		t.Helper()
		var d gale.Decision
		fallbacks := 0
		if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool {
			d = mustCheck(t, closed, "k", 1, now)
			if d.Fallback {
				fallbacks++
			}
			return !d.Fallback
		}) {
			t.Fatalf("%s: no check decided by Redis in %v (%d answered by the policy): %+v", what, testenv.StoreDeadline, fallbacks, d)
		}
		if fallbacks > 0 {
			t.Logf("%s: %d checks answered by the policy before Redis decided (the machine missed the %v timeout)", what, fallbacks, timeout)
		}
		return d
	}

	// judged returns the one store call a check begun at began made, after
	// checking that its deadline was the check's own: budget when set, else
	// the store timeout counted from a moment between the check's start and
	// the call's arrival. A held call (the proxy answers nothing) must have
	// ended at that deadline.
	judged := func(what string, began time.Time, op string, budget time.Time, held bool) storeCall {
		t.Helper()
		calls := rec.take()
		if len(calls) != 1 || calls[0].op != op {
			t.Fatalf("%s: store calls %+v, want one %s", what, calls, op)
		}
		c := calls[0]
		switch {
		case c.deadline.IsZero():
			t.Fatalf("%s: the store call had no deadline", what)
		case !budget.IsZero() && !c.deadline.Equal(budget):
			t.Fatalf("%s: the store call's deadline was %v, want the request's store budget %v", what, c.deadline, budget)
		case budget.IsZero() && (c.deadline.Sub(began) < timeout || c.deadline.Sub(c.arrived) > timeout):
			t.Fatalf("%s: the store call's deadline was %v after the check began and %v after the call reached the store; want the %v store timeout, set by this check",
				what, c.deadline.Sub(began), c.deadline.Sub(c.arrived), timeout)
		case c.err == nil:
			t.Fatalf("%s: the store call succeeded with Redis down", what)
		case held && !errors.Is(c.err, context.DeadlineExceeded):
			t.Fatalf("%s: a held store call ended with %v, not at its deadline", what, c.err)
		}
		return c
	}

	// down makes rounds of checks on every limiter with Redis down, and
	// with budgets, checks on closed under a request's store budget, and
	// judges each.
	down := func(fault string, rounds int, budgets, held bool) {
		t.Helper()
		rec.take()
		for round := range rounds {
			what := fmt.Sprintf("%s, round %d", fault, round)
			began := time.Now()
			if d := mustCheck(t, closed, "k", 1, now); d.Allowed || !d.Fallback {
				t.Fatalf("%s: fail-closed: %+v", what, d)
			}
			judged(what+", fail-closed", began, "check", time.Time{}, held)

			began = time.Now()
			if d := mustCheck(t, open, fmt.Sprintf("cold-%s-%d", fault, round), 1, now); !d.Allowed || !d.Fallback {
				t.Fatalf("%s: fail-open, leased: %+v", what, d)
			}
			judged(what+", fail-open leased", began, "lease", time.Time{}, held)

			began = time.Now()
			_, err := failing.Check(bg, "k", 1, now)
			c := judged(what+", fail-error", began, "check", time.Time{}, held)
			if !errors.Is(err, gale.ErrStore) || !errors.Is(err, c.err) {
				t.Fatalf("%s: fail-error answered %v, want gale.ErrStore wrapping the store's error %v", what, err, c.err)
			}
		}
		if !budgets {
			return
		}
		// A request's store budget: sooner than the timeout, it is the
		// call's deadline; later, the timeout is.
		for _, b := range []struct {
			name   string
			after  time.Duration
			sooner bool
		}{{"a budget sooner than the timeout", timeout / 2, true}, {"a budget later than the timeout", time.Hour, false}} {
			what := fault + ", " + b.name
			began := time.Now()
			budget := began.Add(b.after)
			if d, err := closed.Check(gale.WithStoreBudget(bg, budget), "k", 1, now); err != nil || d.Allowed || !d.Fallback {
				t.Fatalf("%s: fail-closed: %+v, %v", what, d, err)
			}
			if !b.sooner {
				budget = time.Time{}
			}
			judged(what, began, "check", budget, held)
		}
	}

	if d := decided("with Redis up"); !d.Allowed {
		t.Fatalf("denied with Redis up: %+v", d)
	}
	before := closed.Stats()
	proxy.Blackhole("upstream")
	down("unreachable", 2, true, true)
	if st := closed.Stats(); st.StoreErrors-before.StoreErrors != 4 || st.Fallbacks-before.Fallbacks != 4 {
		t.Fatalf("fail-closed stats %+v after 4 failed checks (before: %+v)", st, before)
	}
	proxy.Heal()
	if d := decided("after Redis answered again"); !d.Allowed {
		t.Fatalf("the first check Redis decided after it answered again: %+v", d)
	}
	srv.Kill()
	down("killed", 1, false, false)
	srv.Restart() // returns once the new server answers
	// The new server is empty: the first check it decides admits.
	if d := decided("after Redis came back"); !d.Allowed {
		t.Fatalf("the first check Redis decided after it came back: %+v", d)
	}
}

// TestServerTimeCouplesToRedisClock: with the store on Redis's clock and the
// node's clock ten minutes behind, leased credits still die when Redis's
// window ends, measured on the node's clock.
func TestServerTimeCouplesToRedisClock(t *testing.T) {
	srv := testenv.StartRedis(t)
	// The test judges which clock ends the credits, not latency: its store
	// calls have deadlines a loaded machine cannot miss (gale's 50ms
	// default failed a check so).
	s, err := redisstore.New(srv.Client(), redisstore.Options{ServerTime: true, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := &grantRecorder{Store: s}
	l := newLimiter(t, rec, gale.Config{Rule: gale.Rule{Algorithm: gale.FixedWindow, Limit: 1000, Period: time.Hour}, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}, StoreTimeout: testenv.StoreDeadline})
	// The node's clock is Redis's (TIME, read before the lease) less ten
	// minutes: the grant carries Redis's time, between the two TIMEs read
	// around it.
	before := testenv.ServerTime(t, srv.Client())
	local := before.Add(-10 * time.Minute)
	mustCheck(t, l, "k", 1, local)
	after := testenv.ServerTime(t, srv.Client())
	g := rec.last()
	if g.Now.Before(before) || g.Now.After(after) {
		t.Fatalf("grant carries time %v, not Redis's clock (TIME read %v before the lease, %v after)", g.Now, before, after)
	}
	life := g.WindowEnd.Sub(g.Now)
	if life <= 0 || life > time.Hour {
		t.Fatalf("credits live %v", life)
	}
	mustCheck(t, l, "k", 1, local.Add(life-time.Microsecond))
	if rec.count() != 1 {
		t.Fatal("credits died before Redis's window ended")
	}
	mustCheck(t, l, "k", 1, local.Add(life))
	if rec.count() != 2 {
		t.Fatal("credits outlived Redis's window on the node's clock")
	}
}

// deadlineStore records, for each Check and Lease that reaches its store,
// when it arrived, the deadline its context carried and the error it ended
// with: what a test judges a store timeout by, instead of the wall clock.
type deadlineStore struct {
	gale.Store
	mu    sync.Mutex
	calls []storeCall
}

type storeCall struct {
	op       string    // "check" or "lease"
	arrived  time.Time // when the call reached the store (monotonic)
	deadline time.Time // the context's deadline; zero when it had none
	err      error
}

func (s *deadlineStore) Check(ctx context.Context, key string, r gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	arrived := time.Now()
	d, err := s.Store.Check(ctx, key, r, cost, now)
	s.record(ctx, "check", arrived, err)
	return d, err
}

func (s *deadlineStore) Lease(ctx context.Context, key string, r gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	arrived := time.Now()
	g, err := s.Store.Lease(ctx, key, r, min, max, now)
	s.record(ctx, "lease", arrived, err)
	return g, err
}

func (s *deadlineStore) record(ctx context.Context, op string, arrived time.Time, err error) {
	deadline, _ := ctx.Deadline()
	s.mu.Lock()
	s.calls = append(s.calls, storeCall{op: op, arrived: arrived, deadline: deadline, err: err})
	s.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (s *deadlineStore) take() []storeCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	calls := s.calls
	s.calls = nil
	return calls
}

type grantRecorder struct {
	gale.Store
	mu     sync.Mutex
	grants []gale.Grant
}

func (g *grantRecorder) Lease(ctx context.Context, key string, r gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	gr, err := g.Store.Lease(ctx, key, r, min, max, now)
	g.mu.Lock()
	g.grants = append(g.grants, gr)
	g.mu.Unlock()
	return gr, err
}

func (g *grantRecorder) last() gale.Grant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants[len(g.grants)-1]
}

func (g *grantRecorder) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.grants)
}
