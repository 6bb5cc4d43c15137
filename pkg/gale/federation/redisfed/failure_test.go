package redisfed_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestKilledServer: with Redis dead every operation of the coordinator and
// the escrow fails within its timeout, without a panic; once Redis is back
// (empty, its script cache too) every one works again.
func TestKilledServer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := testenv.StartRedis(t)
	rc := srv.Client()
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
	for _, op := range ops {
		if err := op.run(); err != nil {
			t.Fatalf("%s before the kill: %v", op.name, err)
		}
	}
	srv.Kill()
	for _, op := range ops {
		start := time.Now()
		err := op.run()
		took := time.Since(start)
		if err == nil {
			t.Errorf("%s against a dead server succeeded", op.name)
		}
		if took > 3*timeout {
			t.Errorf("%s failed after %v, with a %v timeout", op.name, took, timeout)
		}
		t.Logf("%s against a dead server: %v after %v", op.name, err, took)
	}
	srv.Restart()
	for _, op := range ops {
		deadline := time.Now().Add(5 * time.Second)
		for attempt := 1; ; attempt++ {
			err := op.run()
			if err == nil {
				t.Logf("%s working again at attempt %d", op.name, attempt)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not working 5s after the restart: %v", op.name, err)
			}
		}
	}
}
