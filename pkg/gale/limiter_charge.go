package gale

import (
	"context"
	"fmt"
	"time"
)

// Charge counts n units of key at now in full, even past the limit, and
// answers whether they fit (charge.go): a cost known once it was spent,
// such as the tokens a response used. n = 0 is a check-only charge: it
// counts nothing and is allowed while the key stands at or below the limit
// — at the limit exactly too, with Remaining 0 — and denied once a charge
// has left it past the limit. An allowed charge answers as a check of n
// does; a charge that did not fit is counted all the same, denied, with
// Overrun the units it counted past the limit and RetryAfter the time
// until a check-only charge is allowed again. A charge is never refunded.
//
// By mode:
//   - strict: the store counts every charge (Store.Charge).
//   - cached_deny: as strict; an overrun is remembered as a denial until
//     its RetryAfter, and answers every check and check-only charge of the
//     key until then. Charges are never answered from memory.
//   - leased: a charge takes what it can from the node's credits, leasing
//     more as a check does; what the store can no longer grant it has the
//     store count in full, as debt that later leases repay: a window whose
//     count stands past the limit grants nothing until it ends. An overrun
//     is remembered as in cached_deny. A check-only charge is allowed from
//     the node's credits while it holds some, leases a batch when it holds
//     none, and asks the store without counting once a lease is denied.
//     (Over a federation.Region the store cannot stand past its limit: see
//     Region.Charge.)
//
// A store failure is answered by OnStoreError, as a check's is, and the
// charge is then not counted. n outside 0..MaxLimit returns ErrInvalidCost.
func (l *Limiter) Charge(ctx context.Context, key string, n int64, now time.Time) (Decision, error) {
	if n < 0 || n > MaxLimit {
		return Decision{}, fmt.Errorf("%w (charging %d)", ErrInvalidCost, n)
	}
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	switch l.mode {
	case CachedDeny:
		return l.chargeCachedDeny(ctx, key, n, now)
	case Leased:
		return l.checkLeased(ctx, key, nil, n, true, now)
	}
	return l.chargeStore(ctx, key, n, now)
}

// ChargeBytes is Charge for a key in bytes, which it does not keep.
func (l *Limiter) ChargeBytes(ctx context.Context, key []byte, n int64, now time.Time) (Decision, error) {
	if l.mode != Leased {
		return l.Charge(ctx, string(key), n, now)
	}
	if n < 0 || n > MaxLimit {
		return Decision{}, fmt.Errorf("%w (charging %d)", ErrInvalidCost, n)
	}
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	return l.checkLeased(ctx, "", key, n, true, now)
}

// chargeStore has the store count n units of key (strict mode, and the
// other modes' way to the store).
func (l *Limiter) chargeStore(ctx context.Context, key string, n int64, now time.Time) (Decision, error) {
	return l.askStore(ctx, key, n, true, now)
}

func (l *Limiter) chargeCachedDeny(ctx context.Context, key string, n int64, now time.Time) (Decision, error) {
	if n == 0 {
		// A remembered overrun (need 0) answers; a denial of a check that
		// did not fit says nothing of whether the key stands past the limit.
		if d, ok := l.l1.cachedDenial(key, 0, now); ok {
			d.Trips = 0
			return d, nil
		}
	}
	d, err := l.chargeStore(ctx, key, n, now)
	if err != nil || d.Allowed || d.Fallback || d.RetryAfter <= 0 {
		return d, err
	}
	deny := d
	deny.Overrun, deny.WindowEnd = 0, time.Time{}
	l.l1.rememberDenial(l, key, 0, deny, now)
	return d, nil
}
