package gale_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestAbandonedLeaseCarriesAtMostBatchMinusOne: uncoupled leasing carries
// at most Batch−1 credits into the next window per node (seed 04's bound),
// even when the check that began a lease just before the boundary gives up
// and a check stamped after the boundary receives the lease. The credits the
// abandoned check needed are dropped, not carried.
func TestAbandonedLeaseCarriesAtMostBatchMinusOne(t *testing.T) {
	// The check gives up because its caller went away, or because its
	// request's store deadline (WithStoreBudget) passed. The budget is
	// spent before the check begins: it gives up as soon as it waits for
	// the lease it started, which the store holds, with no wall-clock
	// deadline to wait out.
	gaveUp := map[string]func() (context.Context, func()){
		"cancelled": func() (context.Context, func()) { return context.WithCancel(bg) },
		"store budget spent": func() (context.Context, func()) {
			return gale.WithStoreBudget(bg, time.Now().Add(-time.Second)), func() {}
		},
	}
	for name, giveUp := range gaveUp {
		t.Run(name, func(t *testing.T) { testAbandonedLease(t, giveUp) })
	}
}

func testAbandonedLease(t *testing.T, giveUp func() (context.Context, func())) {
	const batch = 5
	s := &countingStore{Store: memstore.New(), gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(1000), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: batch, Uncoupled: true}})
	w1 := start.Add(59 * time.Second)
	w2 := start.Add(time.Minute)

	// The first check, stamped in window 1, starts a lease and gives up.
	ctx, cancel := giveUp()
	first := make(chan error, 1)
	go func() { _, err := l.Check(ctx, "k", 1, w1); first <- err }()
	s.waitArrival(t)
	cancel()
	if err := <-first; err == nil {
		t.Fatal("the cancelled check succeeded")
	}
	// The lease lands after the boundary: 5 credits of window 1, which the
	// checks stamped in window 2 find.
	close(s.gate)
	settle(t, l)
	if d := mustCheck(t, l, "k", 1, w2); !d.Allowed || s.leases.Load() != 1 {
		t.Fatalf("second check: %+v, leases %d", d, s.leases.Load())
	}
	served := 1
	for i := 0; i < batch; i++ {
		before := s.leases.Load()
		if !mustCheck(t, l, "k", 1, w2).Allowed {
			t.Fatal("denied")
		}
		if s.leases.Load() != before {
			break // a new lease: the carried credits ran out
		}
		served++
	}
	if served > batch-1 {
		t.Fatalf("window 2 was served %d credits leased in window 1; at most Batch−1 = %d may carry over", served, batch-1)
	}
}
