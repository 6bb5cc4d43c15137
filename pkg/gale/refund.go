package gale

import (
	"context"
	"fmt"
	"time"
)

// Refund gives back cost units that Check admitted with decision d at now,
// when the caller did not use them (another limit of the same request denied
// it). The units go back to the store window they were counted in,
// d.WindowEnd, and to no other: a refund that arrives after that window ended
// is dropped, which can only under-admit. A fallback decision (the store was
// down) took nothing and refunds nothing.
//
// In leased mode the units were served from this node's credits. While the
// credits of d's window are still in place they are restored there
// (window-coupled), or given back to the store's count of that window (where
// credits carry over a boundary, so that a refund never raises what a node
// carries into the next window). Either way at most the units this node
// served from that window are given back.
func (l *Limiter) Refund(ctx context.Context, key string, cost int64, d Decision, now time.Time) error {
	if !d.Allowed || d.Fallback || cost < 1 {
		return nil
	}
	if cost > MaxLimit {
		return fmt.Errorf("%w (refunding %d)", ErrInvalidCost, cost)
	}
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	if l.mode == Leased {
		_, err := l.giveBackLeased(ctx, key, cost, now, true, d.WindowEnd)
		return err
	}
	return l.returnToStore(ctx, key, Return{Credits: cost, WindowEnd: d.WindowEnd, At: now})
}

// GiveBack applies a negative hit (is_negative_hits) of n units of key at
// now: it gives back units the key consumed in the window in place at now,
// never more. It returns how many units it gave back.
//
// In strict and cached-deny mode the units go to the store's count of that
// window, which gives back at most what the window counted, fleet-wide; the
// count returned is then n. In leased mode the store's count includes credits
// other nodes hold and have not served, so a node gives back at most the
// units it served itself from the current window's credits, as Refund does.
func (l *Limiter) GiveBack(ctx context.Context, key string, n int64, now time.Time) (int64, error) {
	if n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("%w (giving back %d)", ErrInvalidCost, n)
	}
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	if l.mode == Leased {
		return l.giveBackLeased(ctx, key, n, now, false, time.Time{})
	}
	var end time.Time
	if l.rule.Windowed() {
		_, we := l.rule.WindowBounds(now.UnixMicro())
		end = time.UnixMicro(we)
	}
	if err := l.returnToStore(ctx, key, Return{Credits: n, WindowEnd: end, At: now}); err != nil {
		return 0, err
	}
	return n, nil
}

// giveBackLeased gives back up to n units key's node served from the credits
// of the window in place at now (of window end only, if onlyWindow), as the
// machine's GiveBack decides.
func (l *Limiter) giveBackLeased(ctx context.Context, key string, n int64, now time.Time, onlyWindow bool, end time.Time) (int64, error) {
	sh := l.l1.shard(key)
	sh.mu.Lock()
	e := sh.keys[key]
	if e == nil {
		sh.mu.Unlock()
		return 0, nil // evicted: nothing of this window to give back to
	}
	if !onlyWindow || e.st.WindowEnd.Equal(end) {
		sh.stranded += l.m.Expire(&e.st, now)
	}
	given, r := l.m.GiveBack(&e.st, now, n, onlyWindow, end)
	sh.mu.Unlock()
	if r.Credits > 0 {
		if err := l.returnToStore(ctx, key, r); err != nil {
			return 0, err
		}
	}
	return given, nil
}

// returnToStore gives r back to the store.
func (l *Limiter) returnToStore(ctx context.Context, key string, r Return) error {
	sctx, cancel := StoreContext(ctx, l.timeout)
	defer cancel()
	if err := l.store.Return(sctx, key, l.rule, r.Credits, r.WindowEnd, r.At); err != nil {
		l.counters.storeErrors.Add(1)
		return err
	}
	l.counters.creditsReturned.Add(r.Credits)
	return nil
}
