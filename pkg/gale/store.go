package gale

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Store is the shared tier (L2): the authority every node of a fleet asks.
// Each operation is atomic for its key. Implementations MUST be safe for
// concurrent use and MUST give the decisions Rule.Take, Rule.Give and
// Rule.Charge define, step for step (the storetest suite checks both).
//
// Times passed in are the caller's clock. A store that reads its own clock
// (the Redis store's server-time option) ignores them and reports its own in
// Grant.Now, so callers convert the window end to their clock by the
// difference rather than by absolute time.
type Store interface {
	// Check takes cost units of key under rule, or nothing.
	Check(ctx context.Context, key string, rule Rule, cost int64, now time.Time) (Decision, error)
	// Lease takes between min and max units of key under rule, as many as
	// remain up to max; none when fewer than min remain.
	Lease(ctx context.Context, key string, rule Rule, min, max int64, now time.Time) (Grant, error)
	// Return gives back credits leased in the window ending at windowEnd (the
	// Grant's WindowEnd). Credits of a window that has ended are dropped.
	Return(ctx context.Context, key string, rule Rule, credits int64, windowEnd, now time.Time) error
	// Charge counts n ≥ 0 units of key under rule in full, even past the
	// limit, and answers whether they fit (Rule.Charge; the decision is
	// Outcome.ChargeDecision's). n = 0 counts nothing: it asks whether the
	// key stands at or below the limit.
	Charge(ctx context.Context, key string, rule Rule, n int64, now time.Time) (Decision, error)
}

// InMemory is implemented by a Store that answers from this process's
// memory and never waits (memstore). A Limiter puts no deadline on its
// calls: the deadline could never fire, and would cost every strict check
// allocations.
type InMemory interface {
	Store
	InMemory()
}

// Forgetful is implemented by a Store that can lose counts it has
// acknowledged — a Redis server restarted without persistence, or a
// replica promoted before replication had carried them — and can tell when
// it may have. A window in place then admits again what the store forgot;
// a strict Limiter over a Forgetful store keeps the denials it was given
// before, and answers from them until they lapse (see Mode), as cached-deny
// and leased limiters always do.
type Forgetful interface {
	Store
	// Forgot is how many times the store may have forgotten counts since it
	// was made. It is raised before any call reaches the server that forgot.
	// Implementations MUST make it cheap and safe for concurrent use: a
	// strict check calls it twice.
	Forgot() uint64
}

// ErrInvalidCost is returned for a cost, or a lease's min and max, that is not
// 1 ≤ min ≤ max ≤ MaxLimit.
var ErrInvalidCost = errors.New("gale: cost must be between 1 and 2^40")

// CheckArgs validates the arguments of Check and Lease; stores call it first.
func CheckArgs(rule Rule, min, max int64) error {
	if err := rule.Validate(); err != nil {
		return err
	}
	if min < 1 || max < min || max > MaxLimit {
		return fmt.Errorf("%w (got %d..%d)", ErrInvalidCost, min, max)
	}
	return nil
}

// CheckReturn validates the arguments of Return; stores call it first.
// Credits ≤ 0 are valid and change nothing.
func CheckReturn(rule Rule, credits int64) error {
	if err := rule.Validate(); err != nil {
		return err
	}
	if credits > MaxLimit {
		return fmt.Errorf("%w (returning %d)", ErrInvalidCost, credits)
	}
	return nil
}

// Decision converts a strategy outcome to a Decision for rule.
func (o Outcome) Decision(rule Rule) Decision {
	d := Decision{
		Allowed:    o.Granted > 0,
		Limit:      rule.Limit,
		Remaining:  o.Remaining,
		ResetAt:    time.UnixMicro(o.ResetAt),
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
	}
	if o.Granted > 0 && o.WindowEnd != 0 {
		d.WindowEnd = time.UnixMicro(o.WindowEnd)
	}
	return d
}

// Grant converts a lease outcome taken at now (Unix µs) to a Grant.
func (o Outcome) Grant(rule Rule, now int64) Grant {
	g := Grant{Granted: o.Granted, Now: time.UnixMicro(now), Decision: o.Decision(rule)}
	if o.WindowEnd != 0 {
		g.WindowEnd = time.UnixMicro(o.WindowEnd)
	}
	return g
}

// MicrosOf returns t as Unix microseconds, 0 for the zero time.
func MicrosOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}
