package gale_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestDecisionTripsCountStoreRoundTrips: a decision says how many store
// round trips its check waited for, which is what a trace of the request
// reports: one per strict check, none for an L1 answer, one for the lease a
// leased check waits on, and one for a failed call that the error policy
// answered.
func TestDecisionTripsCountStoreRoundTrips(t *testing.T) {
	now := start
	strict := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(2)})
	for i, want := range []uint8{1, 1, 1} { // the third is denied by the store
		if d := mustCheck(t, strict, "k", 1, now); d.Trips != want {
			t.Errorf("strict check %d: Trips %d, want %d (%+v)", i, d.Trips, want, d)
		}
	}

	cached := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(1), Mode: gale.CachedDeny})
	for i, want := range []uint8{1, 1, 0} { // admitted, denied by the store, denied from L1
		if d := mustCheck(t, cached, "k", 1, now); d.Trips != want {
			t.Errorf("cached_deny check %d: Trips %d, want %d (%+v)", i, d.Trips, want, d)
		}
	}

	leased := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(100), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}})
	for i, want := range []uint8{1, 0, 0} { // the first waits for the lease; the rest spend its credits
		if d := mustCheck(t, leased, "k", 1, now); d.Trips != want {
			t.Errorf("leased check %d: Trips %d, want %d (%+v)", i, d.Trips, want, d)
		}
	}

	down := &countingStore{Store: memstore.New()}
	down.failing.Store(true)
	open := newLimiter(t, down, gale.Config{Rule: perMinute(1), OnStoreError: gale.FailOpen, StoreTimeout: time.Second})
	if d := mustCheck(t, open, "k", 1, now); !d.Fallback || d.Trips != 1 {
		t.Errorf("failed strict check: %+v, want a fallback after 1 trip", d)
	}
	openLeased := newLimiter(t, down, gale.Config{Rule: perMinute(1), Mode: gale.Leased, OnStoreError: gale.FailOpen, StoreTimeout: time.Second})
	if d := mustCheck(t, openLeased, "k", 1, now); !d.Fallback || d.Trips != 1 {
		t.Errorf("failed leased check: %+v, want a fallback after 1 trip", d)
	}
}
