package gale

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A store that forgets (Forgetful): what a Limiter keeps across it.
//
// A Redis server restarted without persistence comes back empty, and every
// window in place admits its limit again on top of what it had admitted.
// Cached-deny and leased limiters already answer from the denials they were
// given until those lapse, so a key they had been denied stays denied on
// them until its window ends. A strict limiter asks the store every time and
// so knew nothing: killed after a limit of 2,000 was spent, a window
// admitted 3,997.
//
// Over a Forgetful store a strict limiter therefore remembers each denial
// it is given, tagged with the store's Forgot count at the time, and
// answers a check from a remembered denial only when the store has
// forgotten since that denial was given, and only until the denial lapses
// (its RetryAfter: the window's end for a spent window). Until the store
// forgets, strict stays exact — a unit another process refunds is
// admitted at once — and a denial the new server gives is not answered
// from either. Admitted checks pay four atomic loads (the store's count
// twice, and kept's two fields); denials pay one map write, as cached-deny's
// do.

// kept is what a strict limiter knows about the store's forgetting.
type kept struct {
	mu sync.Mutex // serializes notice
	// seen is the latest Forgot count the limiter has acted on.
	seen atomic.Uint64
	// until is the latest instant (Unix µs, the callers' clock) at which a
	// denial given before the store forgot still answers: checks look for
	// one only before it, so that once they have lapsed strict checks pay
	// nothing more.
	until atomic.Int64
}

// checkStrict is a strict check over a Forgetful store.
func (l *Limiter) checkStrict(ctx context.Context, key string, cost int64, now time.Time) (Decision, error) {
	before := l.forgets.Forgot()
	if before > l.kept.seen.Load() {
		l.notice(before)
	}
	if now.UnixMicro() < l.kept.until.Load() {
		if d, ok := l.l1.keptDenial(key, cost, now, before); ok {
			d.Trips = 0 // the kept denial came from the store; this one does not
			return d, nil
		}
	}
	d, err := l.checkStore(ctx, key, cost, now)
	if err != nil || d.Fallback {
		return d, err
	}
	if !d.Allowed {
		if d.RetryAfter > 0 {
			l.rememberStrict(key, cost, d, now, before)
		}
		return d, nil
	}
	// The call may have been the first to reach a new server: the count was
	// raised before it got there.
	if after := l.forgets.Forgot(); after != before {
		l.notice(after)
		if dd, ok := l.l1.keptDenial(key, cost, now, after); ok {
			// The new server counted this unit; the window is the stricter
			// for it, never looser.
			dd.Trips = 1
			return dd, nil
		}
	}
	return d, nil
}

// notice acts on the store having forgotten, forgot times in all: every
// denial remembered before then answers until it lapses.
func (l *Limiter) notice(forgot uint64) {
	l.kept.mu.Lock()
	defer l.kept.mu.Unlock()
	if forgot <= l.kept.seen.Load() {
		return
	}
	var until int64
	for i := range l.l1.shards {
		sh := &l.l1.shards[i]
		sh.mu.Lock()
		for _, e := range sh.keys {
			if e.forgot < forgot {
				until = max(until, MicrosOf(e.st.DenyUntil))
			}
		}
		sh.mu.Unlock()
	}
	l.keepUntil(until)
	l.kept.seen.Store(forgot)
}

// keepUntil makes checks look for kept denials until at least us (Unix µs).
func (l *Limiter) keepUntil(us int64) {
	for {
		cur := l.kept.until.Load()
		if us <= cur || l.kept.until.CompareAndSwap(cur, us) {
			return
		}
	}
}

// rememberStrict remembers the store's denial d of cost for key, given
// while the store's Forgot count was forgot.
func (l *Limiter) rememberStrict(key string, cost int64, d Decision, now time.Time, forgot uint64) {
	t := l.l1
	sh := t.shard(key)
	sh.mu.Lock()
	e := t.getOrCreate(l, sh, key, now)
	if e != nil {
		e.st.RememberDenial(now, cost, d)
		e.forgot = forgot
	}
	sh.mu.Unlock()
	if e != nil && forgot < l.kept.seen.Load() {
		// Given by a server since found to have been replaced (the notice
		// ran while this check was out): it is kept like the others.
		l.keepUntil(MicrosOf(now.Add(d.RetryAfter)))
	}
}

// keptDenial answers a check of cost at now from a denial remembered
// before the store's Forgot count reached forgot.
func (t *table) keptDenial(key string, cost int64, now time.Time, forgot uint64) (Decision, bool) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil || e.forgot >= forgot {
		return Decision{}, false
	}
	d, ok := e.st.CachedDenial(now, cost)
	if ok {
		sh.cachedDenials++
	}
	return d, ok
}
