package gale_test

import (
	"fmt"
	"strconv"
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

// restartSidecar is one sidecar of a restart test: its own client (with a
// restart watch on its OnConnect, as serve installs it), store and limiter.
type restartSidecar struct {
	watch       *redisstore.Watch
	lim         *gale.Limiter
	admitted    atomic.Int64
	checks      atomic.Int64
	denied      atomic.Bool // a denial that is not a fallback
	deniedAfter atomic.Bool // the same, of a check begun after the restart
}

// restartFleet is n sidecars limiting one key on one real Redis.
type restartFleet struct {
	t         *testing.T
	srv       *testenv.Redis
	rule      gale.Rule
	sidecars  []*restartSidecar
	restarted atomic.Bool
}

func newRestartFleet(t *testing.T, n int, mode gale.Mode, rule gale.Rule) *restartFleet {
	f := &restartFleet{t: t, srv: testenv.StartRedis(t), rule: rule}
	for range n {
		w := &redisstore.Watch{}
		// serve's client: no retries, a refused dial not retried, deadlines
		// honoured. The tests judge what the window admitted, not latency:
		// no call of theirs may time out on a loaded machine (a killed
		// server refuses at once).
		c := redis.NewClient(&redis.Options{Addr: f.srv.Addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
			DialTimeout: testenv.StoreDeadline, ReadTimeout: testenv.StoreDeadline, WriteTimeout: testenv.StoreDeadline, OnConnect: w.OnConnect})
		t.Cleanup(func() { _ = c.Close() })
		s, err := redisstore.New(c, redisstore.Options{Timeout: testenv.StoreDeadline, Watch: w})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		l := newLimiter(t, s, gale.Config{Rule: rule, Mode: mode, Lease: gale.LeaseConfig{Batch: 20},
			OnStoreError: gale.FailClosed})
		f.sidecars = append(f.sidecars, &restartSidecar{watch: w, lim: l})
	}
	return f
}

// drive has 4 goroutines per sidecar check key at now until done says the
// sidecar is done, and waits for their leases to land.
func (f *restartFleet) drive(key string, now time.Time, done func(s *restartSidecar) bool) {
	f.t.Helper()
	if err := f.run(key, now, nil, done); err != nil {
		f.t.Fatal(err)
	}
	for _, s := range f.sidecars {
		settle(f.t, s.lim)
	}
}

// run is drive's loop; it may run on another goroutine than the test's.
// With up set, a check not admitted before the restart waits for up to
// close (rather than spin against a refused port or on cached denials).
func (f *restartFleet) run(key string, now time.Time, up <-chan struct{}, done func(s *restartSidecar) bool) error {
	capChecks := 20 * f.rule.Limit
	var wg sync.WaitGroup
	var over atomic.Bool
	for _, s := range f.sidecars {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !done(s) {
					if s.checks.Add(1) > capChecks {
						over.Store(true)
						return
					}
					post := f.restarted.Load()
					d, err := s.lim.Check(bg, key, 1, now)
					if err != nil {
						f.t.Errorf("check: %v", err)
						return
					}
					if d.Allowed {
						s.admitted.Add(1)
						continue
					}
					if !d.Fallback {
						s.denied.Store(true)
						if post {
							s.deniedAfter.Store(true)
						}
					}
					if up != nil && !post {
						<-up
					}
				}
			}()
		}
	}
	wg.Wait()
	if over.Load() {
		return fmt.Errorf("a sidecar made %d checks and was not done", capChecks)
	}
	return nil
}

func (f *restartFleet) admitted() int64 {
	var n int64
	for _, s := range f.sidecars {
		n += s.admitted.Load()
	}
	return n
}

// counted is what the store has counted for key in its window: units
// admitted (strict, cached_deny) or leased (leased).
func (f *restartFleet) counted(key string) int64 {
	f.t.Helper()
	v, err := f.srv.Client().HGet(bg, "tk:{"+key+"}", "c").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// restart kills the server and, while the sidecars check key at now until
// each has been denied by what it learned after, restarts it empty.
func (f *restartFleet) restart(key string, now time.Time) {
	f.t.Helper()
	f.srv.Kill()
	up := make(chan struct{})
	driven := make(chan error, 1)
	go func() {
		driven <- f.run(key, now, up, func(s *restartSidecar) bool { return s.deniedAfter.Load() })
	}()
	f.srv.Restart()
	f.restarted.Store(true)
	close(up)
	if err := <-driven; err != nil {
		f.t.Fatal(err)
	}
	for _, s := range f.sidecars {
		settle(f.t, s.lim)
	}
}

// TestStoreRestart: a Redis without persistence killed and restarted empty
// in the middle of a window, under four sidecars per mode (each its own
// client, restart watch, store and limiter) checking one key with a limit
// of 1,000 until each is denied again. The window admits at most the
// README's row for the mode:
//
//   - restarted once the limit was spent, every sidecar having been denied:
//     exactly the limit — each keeps its denial until the window ends
//     (strict admitted 2× the limit before it kept them);
//   - restarted mid-window, before any denial: at most the limit plus what
//     the store had counted when it died (the units admitted, in strict
//     and cached_deny; the credits leased, in leased mode).
//
// Each sidecar that reached the new server counted one restart.
func TestStoreRestart(t *testing.T) {
	const sidecars = 4
	rule := perMinute(1000)
	for _, mode := range []gale.Mode{gale.Strict, gale.CachedDeny, gale.Leased} {
		t.Run(mode.String()+"/limit spent", func(t *testing.T) {
			f := newRestartFleet(t, sidecars, mode, rule)
			now := storetest.Timeline().Add(10 * time.Second)
			f.drive("k", now, func(s *restartSidecar) bool { return s.denied.Load() })
			if got := f.admitted(); got != rule.Limit {
				t.Fatalf("before the restart the fleet admitted %d, want the limit %d", got, rule.Limit)
			}
			f.restart("k", now.Add(5*time.Second))
			got := f.admitted()
			t.Logf("%v, restart once the limit was spent: the window admitted %d against %d", mode, got, rule.Limit)
			if got > rule.Limit {
				t.Errorf("the window admitted %d across the restart; every sidecar had been denied before it, so want at most the limit %d", got, rule.Limit)
			}
			for i, s := range f.sidecars {
				// Cached-deny and leased sidecars answer from their denials
				// and may never reach the new server.
				if n := s.watch.Restarts(); n > 1 || mode == gale.Strict && n != 1 {
					t.Errorf("sidecar %d counted %d restarts", i, n)
				}
			}
		})
		t.Run(mode.String()+"/mid-window", func(t *testing.T) {
			f := newRestartFleet(t, sidecars, mode, rule)
			now := storetest.Timeline().Add(10 * time.Second)
			var total atomic.Int64
			f.drive("k", now, func(*restartSidecar) bool { return total.Add(1) > rule.Limit/2 })
			lost := f.counted("k")
			before := f.admitted()
			f.restart("k", now.Add(5*time.Second))
			got, bound := f.admitted(), rule.Limit+lost
			t.Logf("%v, restart mid-window: %d admitted before, %d counted by the store; the window admitted %d, bound %d", mode, before, lost, got, bound)
			if got > bound {
				t.Errorf("the window admitted %d across the restart, above the limit %d plus the %d the store forgot", got, rule.Limit, lost)
			}
			for i, s := range f.sidecars {
				if n := s.watch.Restarts(); n != 1 {
					t.Errorf("sidecar %d counted %d restarts, want 1", i, n)
				}
			}
		})
	}
}

// TestStrictKeepsOnlyDenialsTheStoreForgot: strict stays exact while the
// store remembers — a unit another sidecar gives back is admitted at once,
// not answered from the denial this sidecar was given — and after a
// restart answers from the denials given before it, until the window ends;
// a denial the new server gives is not kept, so in the next window strict
// is exact again. A sidecar that was never denied asks the new server.
func TestStrictKeepsOnlyDenialsTheStoreForgot(t *testing.T) {
	f := newRestartFleet(t, 2, gale.Strict, perMinute(3))
	a, b := f.sidecars[0].lim, f.sidecars[1].lim
	t0 := storetest.Timeline().Add(10 * time.Second)
	fill := func(at time.Time) {
		t.Helper()
		for i := 0; ; i++ {
			if d := mustCheck(t, a, "k", 1, at); !d.Allowed {
				return
			}
			if i == 3 {
				t.Fatalf("a limit of 3 admitted 4 checks")
			}
		}
	}
	giveBackAdmits := func(at time.Time, when string) {
		t.Helper()
		if _, err := b.GiveBack(bg, "k", 1, at); err != nil {
			t.Fatal(err)
		}
		if d := mustCheck(t, a, "k", 1, at); !d.Allowed || d.Trips != 1 {
			t.Fatalf("%s: a unit given back by another sidecar: %+v, want admitted by the store", when, d)
		}
	}
	fill(t0)
	giveBackAdmits(t0, "before the restart")
	if d := mustCheck(t, a, "k", 1, t0); d.Allowed {
		t.Fatal("the limit of 3 admitted a 4th")
	}
	f.srv.Restart()
	t1 := t0.Add(time.Second)
	// The first check after the restart reaches the new server (which
	// admits it) and is answered from the kept denial; the next ones are
	// answered from it without asking.
	for i, trips := range []uint8{1, 0, 0} {
		var d gale.Decision
		var err error
		if !testenv.Eventually(func() bool { d, err = a.Check(bg, "k", 1, t1); return err == nil && !d.Fallback }) {
			t.Fatalf("no answer from the restarted server: %+v, %v", d, err)
		}
		if d.Allowed || d.Trips != trips || d.RetryAfter != 49*time.Second {
			t.Fatalf("check %d after the restart: %+v, want denied until the window ends (49s) after %d round trips", i, d, trips)
		}
	}
	if d := mustCheck(t, b, "k", 1, t1); !d.Allowed {
		t.Fatalf("a sidecar never denied, after the restart: %+v, want admitted by the new server", d)
	}
	if n := f.sidecars[0].watch.Restarts(); n != 1 {
		t.Fatalf("%d restarts counted, want 1", n)
	}
	t2 := t0.Add(time.Minute)
	fill(t2)
	giveBackAdmits(t2, "the window after the restart")
}
