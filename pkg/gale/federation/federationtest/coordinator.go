// Package federationtest is the conformance suite of package federation's
// backends: every Coordinator passes RunCoordinator, every Escrow passes
// RunEscrow, and DifferentialCoordinator holds two coordinators to the same
// answers on one random schedule.
//
// The suites walk a fake timeline: backends under test must read the now
// each call passes (a Redis or Postgres backend's caller-clock option).
package federationtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// perMinute is the rule most cases use: 10 units per fixed minute.
var perMinute = gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}

// RunCoordinator runs the Coordinator contract against the coordinator
// newCoord returns. Each subtest uses its own keys, so newCoord may return
// one shared coordinator.
func RunCoordinator(t *testing.T, newCoord func(t *testing.T) federation.Coordinator) {
	cases := []struct {
		name string
		run  func(t *testing.T, c federation.Coordinator, key string, t0 time.Time)
	}{
		{"GrantsUpToTheLimitThenPartialThenNone", grantsUpToLimit},
		{"GrantsDieAtTheWindowEnd", grantsDieAtWindowEnd},
		{"ReconcileGivesBackOncePerToken", reconcileOncePerToken},
		{"ReconcileAfterTheWindowChangesNothing", reconcileAfterWindow},
		{"SlidingWindowCountsThePreviousWindow", slidingWindow},
		{"InvalidArguments", invalidArguments},
		{"LongKeysHaveTheirOwnBudgets", longKeys},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newCoord(t), fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()), storetest.Timeline())
		})
	}
	t.Run("ConcurrentLeasesGrantExactlyTheLimit", func(t *testing.T) { concurrentLeases(t, newCoord(t)) })
	t.Run("ConcurrentDuplicateReconcilesApplyOnce", func(t *testing.T) { concurrentReconciles(t, newCoord(t)) })
	t.Run("Healthy", func(t *testing.T) {
		if err := newCoord(t).Healthy(context.Background()); err != nil {
			t.Fatalf("Healthy: %v", err)
		}
	})
}

func lease(t *testing.T, c federation.Coordinator, key string, r gale.Rule, min, max int64, now time.Time) gale.Grant {
	t.Helper()
	g, err := c.Lease(context.Background(), key, r, min, max, now)
	if err != nil {
		t.Fatalf("Lease(%d..%d) at %v: %v", min, max, now, err)
	}
	return g
}

func reconcile(t *testing.T, c federation.Coordinator, key string, r gale.Rule, rec federation.Reconcile) federation.Reconciled {
	t.Helper()
	got, err := c.Reconcile(context.Background(), key, r, rec)
	if err != nil {
		t.Fatalf("Reconcile(%+v): %v", rec, err)
	}
	return got
}

func grantsUpToLimit(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	steps := []struct {
		min, max, want int64
	}{
		{1, 4, 4},
		{1, 4, 4},
		{1, 4, 2}, // partial: another region raced the budget down
		{1, 1, 0},
	}
	for i, s := range steps {
		g := lease(t, c, key, perMinute, s.min, s.max, t0.Add(time.Duration(i)*time.Second))
		if g.Granted != s.want {
			t.Fatalf("step %d: lease %d..%d granted %d, want %d", i, s.min, s.max, g.Granted, s.want)
		}
		if s.want > 0 && !g.WindowEnd.Equal(t0.Add(time.Minute)) {
			t.Fatalf("step %d: window end %v, want %v", i, g.WindowEnd, t0.Add(time.Minute))
		}
		if s.want > 0 && g.WindowEnd.Sub(g.Now) != time.Minute-time.Duration(i)*time.Second {
			t.Fatalf("step %d: units live %v (WindowEnd − Now), want %v", i, g.WindowEnd.Sub(g.Now), time.Minute-time.Duration(i)*time.Second)
		}
	}
	key2 := key + "/min"
	lease(t, c, key2, perMinute, 7, 7, t0)
	if g := lease(t, c, key2, perMinute, 4, 8, t0); g.Granted != 0 || g.Decision.Allowed || g.Decision.RetryAfter != time.Minute {
		t.Fatalf("lease 4..8 with 3 left: %+v, want nothing, retry in a minute", g)
	}
}

func grantsDieAtWindowEnd(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	if g := lease(t, c, key, perMinute, 10, 10, t0.Add(59*time.Second)); g.Granted != 10 {
		t.Fatalf("first window granted %d, want 10", g.Granted)
	}
	// Nothing of the first window's count reaches the second: a full limit.
	if g := lease(t, c, key, perMinute, 10, 10, t0.Add(time.Minute)); g.Granted != 10 || !g.WindowEnd.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("second window: %+v, want 10 units of the window ending %v", g, t0.Add(2*time.Minute))
	}
}

func reconcileOncePerToken(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	g := lease(t, c, key, perMinute, 10, 10, t0)
	rec := federation.Reconcile{Leftover: 4, WindowEnd: g.WindowEnd, Token: "eu", Now: t0.Add(time.Second)}
	if got := reconcile(t, c, key, perMinute, rec); got != federation.Applied {
		t.Fatalf("first reconcile: %v, want applied", got)
	}
	if got := reconcile(t, c, key, perMinute, rec); got != federation.Duplicate {
		t.Fatalf("retried reconcile: %v, want duplicate", got)
	}
	if g := lease(t, c, key, perMinute, 1, 10, t0.Add(2*time.Second)); g.Granted != 4 {
		t.Fatalf("after one reconcile of 4 (and its retry) the window grants %d, want 4", g.Granted)
	}
	rec.Token, rec.Leftover = "us", 3
	if got := reconcile(t, c, key, perMinute, rec); got != federation.Applied {
		t.Fatalf("another region's reconcile: %v, want applied", got)
	}
	if g := lease(t, c, key, perMinute, 1, 10, t0.Add(3*time.Second)); g.Granted != 3 {
		t.Fatalf("after a second region's reconcile of 3 the window grants %d, want 3", g.Granted)
	}
}

func reconcileAfterWindow(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	g := lease(t, c, key, perMinute, 10, 10, t0)
	rec := federation.Reconcile{Leftover: 10, WindowEnd: g.WindowEnd, Token: "eu", Now: t0.Add(time.Minute)}
	if got := reconcile(t, c, key, perMinute, rec); got != federation.Expired {
		t.Fatalf("reconcile at the window end: %v, want expired", got)
	}
	lease(t, c, key, perMinute, 10, 10, t0.Add(time.Minute))
	if g := lease(t, c, key, perMinute, 1, 1, t0.Add(time.Minute+time.Second)); g.Granted != 0 {
		t.Fatalf("the next window granted %d beyond its limit: a late reconcile carried units over", g.Granted)
	}
}

func slidingWindow(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	r := gale.Rule{Algorithm: gale.SlidingWindow, Limit: 10, Period: time.Minute}
	lease(t, c, key, r, 10, 10, t0)
	// Half-way through the next window half the previous one still counts.
	if g := lease(t, c, key, r, 1, 10, t0.Add(90*time.Second)); g.Granted != 5 {
		t.Fatalf("sliding window half-way through the next window granted %d, want 5", g.Granted)
	}
}

func invalidArguments(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	ctx := context.Background()
	if _, err := c.Lease(ctx, key, gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second}, 1, 1, t0); !errors.Is(err, federation.ErrNotWindowed) {
		t.Errorf("Lease under GCRA: %v, want ErrNotWindowed", err)
	}
	if _, err := c.Lease(ctx, key, perMinute, 0, 1, t0); !errors.Is(err, gale.ErrInvalidCost) {
		t.Errorf("Lease 0..1: %v, want ErrInvalidCost", err)
	}
	end := t0.Add(time.Minute)
	if _, err := c.Reconcile(ctx, key, perMinute, federation.Reconcile{Leftover: 1, WindowEnd: end, Now: t0}); !errors.Is(err, federation.ErrToken) {
		t.Errorf("Reconcile without a token: %v, want ErrToken", err)
	}
	if _, err := c.Reconcile(ctx, key, perMinute, federation.Reconcile{Leftover: 1, Token: "eu", Now: t0}); err == nil {
		t.Errorf("Reconcile of no window: no error")
	}
}

// hammer runs take from 16 goroutines, 20 times each, and returns the sum
// of what it took; an error fails t.
func hammer(t *testing.T, take func() (int64, error)) int64 {
	var sum atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				n, err := take()
				if err != nil {
					t.Error(err)
					return
				}
				sum.Add(n)
			}
		}()
	}
	wg.Wait()
	return sum.Load()
}

func concurrentLeases(t *testing.T, c federation.Coordinator) {
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: time.Hour}
	key, now := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()), storetest.Timeline()
	got := hammer(t, func() (int64, error) {
		g, err := c.Lease(context.Background(), key, r, 1, 3, now)
		return g.Granted, err
	})
	if got != 100 {
		t.Fatalf("16 regions leasing 1..3 concurrently were granted %d in one window, want exactly the limit 100", got)
	}
}

func concurrentReconciles(t *testing.T, c federation.Coordinator) {
	key, now := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()), storetest.Timeline()
	g := lease(t, c, key, perMinute, 10, 10, now)
	var applied atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.Reconcile(context.Background(), key, perMinute, federation.Reconcile{Leftover: 5, WindowEnd: g.WindowEnd, Token: "eu", Now: now})
			if err != nil {
				t.Error(err)
			}
			if got == federation.Applied {
				applied.Add(1)
			}
		}()
	}
	wg.Wait()
	if applied.Load() != 1 {
		t.Fatalf("16 concurrent copies of one reconcile were applied %d times, want once", applied.Load())
	}
	if g := lease(t, c, key, perMinute, 1, 10, now); g.Granted != 5 {
		t.Fatalf("after the reconcile of 5 the window grants %d, want 5", g.Granted)
	}
}
