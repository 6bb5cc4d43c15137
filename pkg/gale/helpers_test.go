package gale_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// countingStore wraps a real store and counts the calls that reach it,
// including how many leases are in flight at once. It can also be made to
// fail, standing in for a store that is down.
type countingStore struct {
	gale.Store
	checks, leases, returns atomic.Int64
	charges                 atomic.Int64
	inflight, maxInflight   atomic.Int64
	failing                 atomic.Bool
	gate                    chan struct{} // when non-nil, leases wait on it
	arrived                 chan struct{} // when non-nil, receives once per lease that reaches the store
	returned                chan struct{} // when non-nil, receives once per return the store took
	mu                      sync.Mutex
}

// settle waits for every background lease and return l began to land: a
// condition, with testenv.StoreDeadline as its deadline.
func settle(t *testing.T, l *gale.Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.StoreDeadline)
	defer cancel()
	if err := l.Settle(ctx); err != nil {
		t.Fatalf("background leases still in flight after %v: %+v", testenv.StoreDeadline, l.Stats())
	}
}

// waitArrival waits for a lease to reach c (c.arrived must be set).
func (c *countingStore) waitArrival(t *testing.T) {
	t.Helper()
	select {
	case <-c.arrived:
	case <-time.After(testenv.StoreDeadline):
		t.Fatalf("no lease reached the store in %v", testenv.StoreDeadline)
	}
}

var errDown = errors.New("store is down")

func (c *countingStore) Check(ctx context.Context, key string, r gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	c.checks.Add(1)
	if c.failing.Load() {
		return gale.Decision{}, errDown
	}
	return c.Store.Check(ctx, key, r, cost, now)
}

func (c *countingStore) Lease(ctx context.Context, key string, r gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	c.leases.Add(1)
	n := c.inflight.Add(1)
	defer c.inflight.Add(-1)
	c.mu.Lock()
	if n > c.maxInflight.Load() {
		c.maxInflight.Store(n)
	}
	gate, arrived := c.gate, c.arrived
	c.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return gale.Grant{}, ctx.Err()
		}
	}
	if c.failing.Load() {
		return gale.Grant{}, errDown
	}
	return c.Store.Lease(ctx, key, r, min, max, now)
}

func (c *countingStore) Return(ctx context.Context, key string, r gale.Rule, n int64, end, now time.Time) error {
	c.returns.Add(1)
	if c.failing.Load() {
		return errDown
	}
	err := c.Store.Return(ctx, key, r, n, end, now)
	if c.returned != nil {
		c.returned <- struct{}{}
	}
	return err
}
