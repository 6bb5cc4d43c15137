package gale

import (
	"context"
	"errors"
	"time"
)

type storeBudgetKey struct{}

// errLeaseWait is the store failure of a leased check whose request's store
// deadline passed while it waited for a lease.
var errLeaseWait = errors.New("the request's store deadline passed while a lease was in flight")

// WithStoreBudget bounds every store call made under the returned context
// to end by deadline, besides each call's own StoreTimeout: a request that
// asks several limits then waits for the store once, not once per limit.
// The deadline does not cancel ctx: a call it cuts short is a store failure,
// which OnStoreError decides, not a caller that went away. A sooner budget
// already on ctx is kept.
func WithStoreBudget(ctx context.Context, deadline time.Time) context.Context {
	if b, ok := storeBudget(ctx); ok && !deadline.Before(b) {
		return ctx
	}
	return &budgetCtx{Context: ctx, deadline: deadline}
}

// budgetCtx carries a store budget: one allocation, where context.WithValue
// would take a second to box the time.
type budgetCtx struct {
	context.Context
	deadline time.Time
}

func (c *budgetCtx) Value(key any) any {
	if key == (storeBudgetKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// storeBudget returns ctx's store deadline, if it has one.
func storeBudget(ctx context.Context) (time.Time, bool) {
	if c, ok := ctx.Value(storeBudgetKey{}).(*budgetCtx); ok {
		return c.deadline, true
	}
	return time.Time{}, false
}

// StoreContext returns the context for one store call under ctx: it ends
// after timeout, or at ctx's store budget (WithStoreBudget) if sooner.
func StoreContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(timeout)
	if b, ok := storeBudget(ctx); ok && b.Before(deadline) {
		deadline = b
	}
	return context.WithDeadline(ctx, deadline)
}
