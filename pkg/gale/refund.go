package gale

import (
	"context"
	"time"
)

// Refund gives back cost units that Check admitted with decision d at now,
// when the caller did not use them (another limit of the same request denied
// it). In leased mode the units go back to the key's local credits, if those
// still belong to the window that admitted them; otherwise they go back to
// the store, into the window that admitted them (d.ResetAt for the windowed
// strategies). A refund that arrives after that window ended is dropped: it
// can only under-admit. A fallback decision (the store was down) took
// nothing and refunds nothing.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64, d Decision, now time.Time) error {
	if !d.Allowed || d.Fallback || cost < 1 {
		return nil
	}
	if cost > MaxLimit {
		return ErrInvalidCost
	}
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	if l.mode == Leased {
		sh := l.l1.shard(key)
		sh.mu.Lock()
		e := sh.keys[key]
		if e != nil {
			sh.expire(e, now)
			if e.expires.IsZero() || now.Before(e.expires) {
				e.credits += cost
				e.fromWindow += cost
				sh.mu.Unlock()
				return nil
			}
		}
		sh.mu.Unlock()
		return nil // the credits' window is gone, or the key was evicted: nothing to give back
	}
	var windowEnd time.Time
	if l.rule.Windowed() {
		windowEnd = d.ResetAt
	}
	sctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.store.Return(sctx, key, l.rule, cost, windowEnd, now); err != nil {
		l.counters.storeErrors.Add(1)
		return err
	}
	l.counters.creditsReturned.Add(cost)
	return nil
}
