package redisstore_test

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// watched is a store on srv whose client carries w on its OnConnect, as
// serve builds it (no retries, a refused dial not retried), and whose
// round trips a loaded machine cannot time out (StoreDeadline).
func watched(t *testing.T, srv *testenv.Redis, w *redisstore.Watch, user, password string) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: user, Password: password, MaxRetries: -1, DialerRetries: 1, OnConnect: w.OnConnect})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Watch: w, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// restarts records what a Watch reports.
type restarts struct {
	mu   sync.Mutex
	seen []redisstore.Restart
}

func (r *restarts) add(x redisstore.Restart) { r.mu.Lock(); r.seen = append(r.seen, x); r.mu.Unlock() }

func (r *restarts) all() []redisstore.Restart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]redisstore.Restart(nil), r.seen...)
}

// TestWatchSeesARestart: a server killed and started again on its address
// is a new one (its run_id changed), counted once however many connections
// find it, and the count is up before the first call that reaches it
// returns; the same server reconnected to is not. A durable server's
// restart is counted too, and reported as keeping an append-only file.
func TestWatchSeesARestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		start   func(testing.TB) *testenv.Redis
		durable bool
	}{
		{"empty", testenv.StartRedis, false},
		{"appendonly", testenv.StartRedisDurable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.start(t)
			var got restarts
			w := &redisstore.Watch{OnRestart: got.add}
			s := watched(t, srv, w, "", "")
			now := timeline()
			check := func() error { _, err := s.Check(ctx, "k", minute, 1, now); return err }
			if err := check(); err != nil {
				t.Fatal(err)
			}
			// Every connection dropped, the server the same: not a restart.
			if err := srv.Client().ClientKillByFilter(ctx, "TYPE", "normal").Err(); err != nil {
				t.Fatal(err)
			}
			if !testenv.Eventually(func() bool { return check() == nil }) {
				t.Fatal("no check answered after the connections were dropped")
			}
			if n := s.Forgot(); n != 0 {
				t.Fatalf("Forgot = %d after a reconnection to the same server, want 0", n)
			}
			srv.Restart()
			// Concurrent first calls: several connections find the new
			// server, one restart is counted.
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A dead pooled connection fails once; the next dials.
					for i := 0; check() != nil; i++ {
						if i == 10 {
							t.Error("10 checks failed after the server was back")
							return
						}
					}
					if s.Forgot() != 1 {
						t.Error("a call returned from the new server before the restart was counted")
					}
				}()
			}
			wg.Wait()
			if n := s.Forgot(); n != 1 {
				t.Fatalf("Forgot = %d after one restart, want 1", n)
			}
			rs := got.all()
			if len(rs) != 1 {
				t.Fatalf("OnRestart called %d times, want 1: %+v", len(rs), rs)
			}
			r := rs[0]
			if r.Server != srv.Addr || r.Was == "" || r.Now == "" || r.Was == r.Now || r.Uptime > time.Minute || r.AppendOnly != tc.durable {
				t.Fatalf("OnRestart(%+v), want server %s, two run_ids, an uptime of seconds, AppendOnly %v", r, srv.Addr, tc.durable)
			}
		})
	}
}

// TestWatchBlind: a user the server refuses INFO still gets its calls
// answered; the watch says once that it cannot see restarts, and counts
// none.
func TestWatchBlind(t *testing.T) {
	srv := testenv.StartRedis(t)
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	var blind []error
	var mu sync.Mutex
	w := &redisstore.Watch{OnBlind: func(err error) { mu.Lock(); blind = append(blind, err); mu.Unlock() }}
	s := watched(t, srv, w, "noinfo", "pw")
	for range 3 {
		if _, err := s.Check(ctx, "k", minute, 1, timeline()); err != nil {
			t.Fatalf("a check as a user without INFO: %v", err)
		}
	}
	srv.Restart()
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	if !testenv.Eventually(func() bool { _, err := s.Check(ctx, "k", minute, 1, timeline()); return err == nil }) {
		t.Fatal("no check answered after the restart")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(blind) != 1 || s.Forgot() != 0 {
		t.Fatalf("OnBlind called with %v, Forgot = %d; want one call and 0", blind, s.Forgot())
	}
}
