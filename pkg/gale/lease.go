package gale

import (
	"context"
	"time"
)

// leaseCall is one lease in flight; every check that misses on its key while
// it runs waits for it instead of asking the store itself.
type leaseCall struct {
	done chan struct{} // closed when the lease has landed in the entry
	err  error         // the store's error, set before done is closed
	// need is what the check that began the lease needed; abandoned is set
	// (under the shard lock) when that check gave up before the lease
	// landed. Uncoupled, those credits are dropped when it lands: the bound
	// Limit + N·(Batch−1) rests on the starting check consuming its share.
	need      int64
	abandoned bool
	landed    bool // guarded by the shard lock
}

// checkLeased serves from local credits, leasing on shortage.
//
// The loop ends because each pass either serves, denies, fails, waits for
// a lease that lands credits or a remembered denial, or gives back credits
// that cannot serve the check (the entry then holds none).
func (l *Limiter) checkLeased(ctx context.Context, key string, cost int64, now time.Time) (Decision, error) {
	sh := l.l1.shard(key)
	waited := false             // counters say "local" only for checks that never waited on the store
	var budget <-chan time.Time // fires at the request's store deadline (WithStoreBudget), once armed
	for {
		sh.mu.Lock()
		e := l.l1.getOrCreate(l, sh, key, now)
		if e == nil {
			sh.mu.Unlock()
			return l.checkStore(ctx, key, cost, now)
		}
		e.lastUsed = now
		sh.expire(e, now)
		l.track(e, now)
		if e.credits >= cost {
			e.credits -= cost
			e.served += cost
			e.used += cost
			if !waited {
				sh.localHits++
			}
			// Credits carried from an earlier lease and the store's count
			// at the last lease may add up to more than the rule ever
			// admits at once (a low-water refill landing on a store that
			// has refilled meanwhile): report at most the capacity.
			d := Decision{Allowed: true, Limit: l.rule.Limit, Remaining: min(e.credits+e.remote, l.rule.Capacity()), ResetAt: e.reset, WindowEnd: e.windowEnd}
			if now.After(e.reset) && l.rule.Windowed() {
				// Uncoupled credits outlive their window: the window in
				// place is the one to report.
				_, we := l.rule.WindowBounds(now.UnixMicro())
				d.ResetAt = time.UnixMicro(we)
			}
			if l.lease.LowWater > 0 && e.credits <= l.lease.LowWater && e.lease == nil && !now.Before(e.denyUntil) {
				l.refill(e, now)
			}
			sh.mu.Unlock()
			return d, nil
		}
		need := cost - e.credits
		if d, ok := e.denied(need, now); ok {
			if e.credits > 0 && !l.carries() && !e.denyUntil.Before(e.until) {
				// The store can give the rest of the need only once the
				// window of these credits has ended, and they die with it:
				// a retry at the denial's RetryAfter would find them gone
				// and need the whole cost. Give them back, as an idle
				// return would, and ask again for the whole cost, so that
				// the RetryAfter answered is when this check fits.
				n := min(e.credits, e.fromWindow)
				e.credits -= n
				e.fromWindow -= n
				e.denyUntil = time.Time{}
				end := e.windowEnd
				sh.mu.Unlock()
				waited = true
				// A failed return only under-admits: the credits are gone.
				_ = l.returnToStore(l.bg, key, n, end, now)
				continue
			}
			if !waited {
				sh.cachedDenials++
			}
			sh.mu.Unlock()
			return d, nil
		}
		call := e.lease
		mine := call == nil
		if mine {
			call = l.startLease(e, need, max(l.batch(e), cost), now)
		}
		sh.mu.Unlock()
		waited = true
		if budget == nil {
			if b, ok := storeBudget(ctx); ok {
				t := time.NewTimer(time.Until(b))
				defer t.Stop()
				budget = t.C
			}
		}
		select {
		case <-call.done:
		case <-ctx.Done():
			if mine && l.lease.Uncoupled {
				l.abandon(sh, e, call)
			}
			return Decision{}, ctx.Err()
		case <-budget:
			// The request's store deadline passed: it gives up as a
			// cancelled one does, and OnStoreError answers.
			if mine && l.lease.Uncoupled {
				l.abandon(sh, e, call)
			}
			return l.failed(ctx, errLeaseWait)
		}
		if call.err == ErrClosed {
			return Decision{}, ErrClosed
		}
		if call.err != nil {
			return l.failed(ctx, call.err)
		}
	}
}

// refill starts a background lease for e, whose credits are at or below
// the low water. Where credits carry over a boundary (uncoupled, or a
// strategy without windows) it asks only for what tops the node up to a
// batch: a node then never holds more than a batch of credits, whatever the
// low water, and a fleet's carry into a window is at most N·Batch. Called
// with e's shard locked.
func (l *Limiter) refill(e *entry, now time.Time) {
	want := l.batch(e)
	if l.carries() {
		want -= e.credits
	}
	if want >= 1 {
		l.startLease(e, 1, want, now)
	}
}

// carries reports whether leased credits outlive the store window that
// granted them.
func (l *Limiter) carries() bool { return l.lease.Uncoupled || !l.rule.Windowed() }

// startLease sets a lease in flight for e. Called with e's shard locked.
func (l *Limiter) startLease(e *entry, min, max int64, now time.Time) *leaseCall {
	call := &leaseCall{done: make(chan struct{}), need: min}
	if l.closed.Load() {
		// Close has passed (or is passing) its barrier: start nothing.
		call.err = ErrClosed
		close(call.done)
		return call
	}
	e.lease = call
	l.counters.leasesRequested.Add(1)
	l.counters.lastBatch.Store(max)
	l.wg.Add(1)
	go l.runLease(e, call, min, max, now)
	return call
}

// runLease asks the store for credits and lands the answer in e. It runs on
// the limiter's own context, not the request's: a grant is never lost because
// the request that started it went away.
func (l *Limiter) runLease(e *entry, call *leaseCall, min, max int64, now time.Time) {
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(l.bg, l.timeout)
	g, err := l.store.Lease(ctx, e.key, l.rule, min, max, now)
	cancel()
	sh := l.l1.shard(e.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	defer close(call.done)
	e.lease = nil
	call.landed = true
	if err != nil {
		call.err = err
		return
	}
	// The store's instants are on the store's clock: carry them over to ours
	// by their distance from the store's now. `now` was read before the
	// request was sent, so the credits die no later than the store's window.
	local := func(t time.Time) time.Time { return now.Add(t.Sub(g.Now)) }
	if g.Granted == 0 {
		e.denyUntil, e.denyNeed, e.deny = now.Add(g.Decision.RetryAfter), min, g.Decision
		return
	}
	l.counters.leasesGranted.Add(1)
	l.counters.creditsLeased.Add(g.Granted)
	e.denyUntil = time.Time{}
	sh.expire(e, now)
	if !g.WindowEnd.Equal(e.windowEnd) {
		if !l.lease.Uncoupled && e.credits > 0 {
			// Credits of an older window must not ride on the new window's
			// expiry.
			sh.stranded += e.credits
			e.credits = 0
		}
		e.windowEnd, e.fromWindow, e.used = g.WindowEnd, 0, 0
	}
	e.credits += g.Granted
	e.fromWindow += g.Granted
	if call.abandoned {
		drop(sh, e, call.need)
	}
	if !g.WindowEnd.IsZero() {
		e.until = local(g.WindowEnd)
		if !l.lease.Uncoupled {
			e.expires = e.until
		}
	}
	e.remote, e.reset = g.Decision.Remaining, local(g.Decision.ResetAt)
}

// returnLater gives credits back to the store in the background.
// Called with a shard locked (see Close's barrier).
func (l *Limiter) returnLater(r returned) {
	if l.closed.Load() {
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ctx, cancel := context.WithTimeout(l.bg, l.timeout)
		defer cancel()
		if err := l.store.Return(ctx, r.key, l.rule, r.credits, r.windowEnd, r.now); err != nil {
			l.counters.storeErrors.Add(1)
			return
		}
		l.counters.creditsReturned.Add(r.credits)
	}()
}

// ReturnIdle returns the credits of every key with no check since
// now − LeaseConfig.ReturnIdleAfter to the store, and forgets those keys. The
// limiter calls it on its clock every half idle period; it is exported for
// callers that drive time themselves. It returns the number of keys dropped.
func (l *Limiter) ReturnIdle(ctx context.Context, now time.Time) int {
	if l.l1 == nil || l.lease.ReturnIdleAfter <= 0 {
		return 0
	}
	cutoff := now.Add(-l.lease.ReturnIdleAfter)
	var dropped int
	rs := l.l1.drain(l, func(e *entry) bool {
		idle := !e.lastUsed.After(cutoff)
		if idle {
			dropped++
		}
		return idle
	}, now)
	for _, r := range rs {
		sctx, cancel := StoreContext(ctx, l.timeout)
		err := l.store.Return(sctx, r.key, l.rule, r.credits, r.windowEnd, r.now)
		cancel()
		if err != nil {
			l.counters.storeErrors.Add(1)
			continue
		}
		l.counters.creditsReturned.Add(r.credits)
	}
	return dropped
}

func (l *Limiter) sweep() {
	defer l.wg.Done()
	t := l.clock.NewTicker(max(l.lease.ReturnIdleAfter/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case now := <-t.C():
			l.ReturnIdle(l.bg, now)
		}
	}
}

// batch is the size of e's next lease. Called with e's shard locked.
func (l *Limiter) batch(e *entry) int64 {
	if e.sizer == nil {
		return l.lease.Batch
	}
	return min(max(e.sizer.Batch(), 1), MaxLimit)
}

// track feeds e's sizer the demand of each window that has ended: windows of
// the rule (a bucket's are its period) on the caller's clock. Called with e's
// shard locked.
func (l *Limiter) track(e *entry, now time.Time) {
	if l.lease.NewSizer == nil {
		return
	}
	if e.sizer == nil {
		e.sizer = l.lease.NewSizer()
	}
	us := now.UnixMicro()
	w, _ := l.rule.WindowBounds(us)
	if !l.rule.Windowed() {
		p := int64(l.rule.Period / time.Microsecond)
		w = floorDiv(us, p) * p
	}
	if w != e.window {
		if e.window != 0 {
			e.sizer.Observe(float64(e.served))
		}
		e.window, e.served = w, 0
	}
}

// abandon records that the check which began call gave up. Uncoupled, the
// credits it needed must not carry on to other checks, which may be stamped
// in a later window: dropped now if the lease has landed, when it lands
// otherwise.
func (l *Limiter) abandon(sh *tshard, e *entry, call *leaseCall) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if call.landed {
		if call.err == nil {
			drop(sh, e, call.need)
		}
		return
	}
	call.abandoned = true
}

// drop strands up to n of e's credits. Called with sh locked.
func drop(sh *tshard, e *entry, n int64) {
	n = min(n, e.credits)
	e.credits -= n
	e.fromWindow = max(e.fromWindow-n, 0)
	sh.stranded += n
}
