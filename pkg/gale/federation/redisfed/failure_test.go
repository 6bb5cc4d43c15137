package redisfed_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestKilledServer: with Redis dead every operation of the coordinator and
// the escrow fails, without a panic, and every command it hands the client
// carries a deadline at most the operation's timeout after it was handed
// over; once Redis is back (empty, its script cache too) every one works
// again. Judged by the deadlines the commands carried, not by how long the
// operations took.
func TestKilledServer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := testenv.StartRedis(t)
	// As the sidecar makes its client: no retries, one dial (a dead server
	// refuses at once), bounded by the operation's deadline.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	trips := &testenv.Sent{}
	rc.AddHook(trips) // before the coordinator: its store's pipelines are built with it
	c, err := redisfed.NewCoordinator(rc, redisstore.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := redisfed.NewEscrow(rc, redisfed.EscrowOptions{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.Timeline()
	w := federation.Window{End: now.Add(time.Minute), TTL: time.Minute}
	ops := []struct {
		name string
		run  func() error
	}{
		{"Lease", func() error { _, err := c.Lease(ctx, "k", perMinute, 1, 1, now); return err }},
		{"Reconcile", func() error {
			_, err := c.Reconcile(ctx, "k", perMinute, federation.Reconcile{Leftover: 1, WindowEnd: w.End, Token: "eu", Now: now})
			return err
		}},
		{"Healthy", func() error { return c.Healthy(ctx) }},
		{"Refill", func() error { _, err := e.Refill(ctx, "k", 3, w, now); return err }},
		{"Take", func() error { _, err := e.Take(ctx, "k", 1, 1, now); return err }},
		{"Release", func() error { _, err := e.Release(ctx, "k", w.End, now); return err }},
	}
	// working waits, not timing it, until op works: before the kill (a
	// round trip of 300ms is missed now and then on a loaded machine) and
	// after the restart.
	working := func(op string, run func() error) int {
		t.Helper()
		var err error
		failed := -1
		if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool {
			failed++
			err = run()
			return err == nil
		}) {
			t.Fatalf("%s not working in %v: %v", op, testenv.StoreDeadline, err)
		}
		return failed
	}
	for _, op := range ops {
		working(op.name, op.run)
	}
	srv.Kill()
	for _, op := range ops {
		trips.Take("")
		done := make(chan error, 1)
		go func() { done <- op.run() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s against a dead server succeeded", op.name)
			}
			t.Logf("%s against a dead server: %v", op.name, err)
		case <-time.After(testenv.StoreDeadline):
			t.Fatalf("%s against a dead server still waiting after %v", op.name, testenv.StoreDeadline)
		}
		cmds := trips.Take("")
		if len(cmds) == 0 {
			t.Errorf("%s against a dead server sent no command", op.name)
		}
		for _, c := range cmds {
			if c.Deadline.IsZero() || c.Deadline.Sub(c.Began) > timeout {
				t.Errorf("%s: %s was sent with a deadline %v after it was handed over (zero: none); want at most the %v timeout", op.name, c.Args[0], c.Deadline.Sub(c.Began), timeout)
			}
		}
	}
	srv.Restart()
	for _, op := range ops {
		t.Logf("%s working again after %d failures", op.name, working(op.name, op.run))
	}
}
