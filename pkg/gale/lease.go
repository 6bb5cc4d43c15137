package gale

import (
	"context"
	"errors"
	"math"
	"time"
)

// leaseCall is one lease in flight, the driver's side of KeyState.Lease:
// every check that misses on its key while it runs waits for it instead of
// asking the store itself.
type leaseCall struct {
	done chan struct{} // closed when the lease has landed in the entry
	err  error         // the store's error, set before done is closed
}

// checkLeased drives the Machine for one check — or, with charge, one
// charge of cost units (limiter_charge.go): it serves, denies, or performs
// what the machine asks (a lease, a wait for one, a return, a charge the
// store counts) and asks again.
//
// The key is key, or, when kb is not nil, kb's bytes: looked up without a
// copy, and made a string only for a key L1 does not hold yet.
func (l *Limiter) checkLeased(ctx context.Context, key string, kb []byte, cost int64, charge bool, now time.Time) (Decision, error) {
	var sh *tshard
	if kb != nil {
		sh = l.l1.shardBytes(kb)
	} else {
		sh = l.l1.shard(key)
	}
	var trips uint8             // store round trips waited on; counters say "local" only for checks with none
	var budget <-chan time.Time // fires at the request's store deadline (WithStoreBudget), once armed
	var d Decision
	for {
		sh.mu.Lock()
		var e *entry
		if kb != nil {
			if e = sh.keys[string(kb)]; e != nil { // no copy: a lookup by converted bytes
				key = e.key
			} else {
				key = string(kb)
			}
			kb = nil
		}
		if e == nil {
			e = l.l1.getOrCreate(l, sh, key, now)
		}
		if e == nil {
			sh.mu.Unlock()
			var d Decision
			var err error
			if charge {
				d, err = l.chargeStore(ctx, key, cost, now)
			} else {
				d, err = l.checkStore(ctx, key, cost, now)
			}
			d.Trips += trips
			return d, err
		}
		var st Step
		if charge {
			// What the credits did not cover is still to count.
			st = l.m.Charge(&e.st, now, cost, &d)
			cost = st.Credits
		} else {
			st = l.m.Check(&e.st, now, cost, &d)
		}
		sh.stranded += st.Stranded
		switch st.Kind {
		case Served:
			if trips == 0 {
				sh.localHits++
			}
			d.Trips = trips
			if st.Refill {
				l.startLease(e, &st, now)
			}
			sh.mu.Unlock()
			return d, nil
		case Denied:
			if trips == 0 {
				sh.cachedDenials++
			}
			d.Trips = trips
			sh.mu.Unlock()
			return d, nil
		case MustReturn:
			r := Return{Credits: st.Credits, WindowEnd: e.st.WindowEnd, At: now}
			sh.mu.Unlock()
			trips = min(trips+1, math.MaxUint8)
			// A failed return only under-admits: the credits are gone.
			_ = l.returnToStore(l.bg, key, r)
			continue
		case MustCharge:
			sh.mu.Unlock()
			d, err := l.chargeStore(ctx, key, cost, now)
			d.Trips = min(trips+1, math.MaxUint8)
			if err == nil {
				sh.mu.Lock()
				l.m.Charged(&e.st, now, d)
				sh.mu.Unlock()
			}
			return d, err
		}
		call := e.call
		if st.Kind == MustLease {
			call = l.startLease(e, &st, now)
		}
		sh.mu.Unlock()
		trips = min(trips+1, math.MaxUint8)
		if budget == nil {
			if b, ok := storeBudget(ctx); ok {
				// Not stopped: an unreferenced timer is collected (Go ≥
				// 1.23), and a defer here would cost every local hit.
				budget = time.NewTimer(time.Until(b)).C
			}
		}
		var gaveUp error
		select {
		case <-call.done:
		case <-ctx.Done():
			gaveUp = ctx.Err()
		case <-budget:
			// The request's store deadline passed: it gives up as a
			// cancelled one does, and OnStoreError answers.
			gaveUp = errLeaseWait
		}
		if gaveUp != nil {
			if st.Kind == MustLease {
				l.abandon(sh, e, call, &st)
			}
			if gaveUp == errLeaseWait {
				d, err := l.failed(ctx, gaveUp)
				d.Trips = trips
				return d, err
			}
			return Decision{}, gaveUp
		}
		if errors.Is(call.err, ErrClosed) {
			return Decision{}, ErrClosed
		}
		if call.err != nil {
			d, err := l.failed(ctx, call.err)
			d.Trips = trips
			return d, err
		}
	}
}

// abandon tells the machine that the check which began lease st gave up.
func (l *Limiter) abandon(sh *tshard, e *entry, call *leaseCall, st *Step) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	granted := false
	if e.st.Lease != st.Lease {
		<-call.done // landed: err was set before done closed
		granted = call.err == nil
	}
	sh.stranded += l.m.Abandon(&e.st, st.Lease, st.Min, granted)
}

// startLease performs the lease the machine began in st, in the background.
// Called with e's shard locked.
func (l *Limiter) startLease(e *entry, st *Step, now time.Time) *leaseCall {
	call := &leaseCall{done: make(chan struct{})}
	if l.closed.Load() {
		// Close has passed (or is passing) its barrier: start nothing.
		l.m.Failed(&e.st, st.Lease)
		call.err = ErrClosed
		close(call.done)
		return call
	}
	e.call = call
	l.counters.leasesRequested.Add(1)
	l.counters.lastBatch.Store(st.Max)
	l.wg.Add(1)
	l.bgWork.start()
	go l.runLease(e, call, st.Lease, st.Min, st.Max, now)
	return call
}

// runLease asks the store for credits and lands the answer in e. It runs on
// the limiter's own context, not the request's: a grant is never lost because
// the request that started it went away.
func (l *Limiter) runLease(e *entry, call *leaseCall, id uint64, min, max int64, now time.Time) {
	defer l.wg.Done()
	defer l.bgWork.done() // after the grant has landed
	ctx, cancel := context.WithTimeout(l.bg, l.timeout)
	g, err := l.store.Lease(ctx, e.key, l.rule, min, max, now)
	cancel()
	sh := l.l1.shard(e.key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	defer close(call.done)
	if e.call == call {
		e.call = nil
	}
	if err != nil {
		call.err = err
		l.m.Failed(&e.st, id)
		return
	}
	if g.Granted > 0 {
		l.counters.leasesGranted.Add(1)
		l.counters.creditsLeased.Add(g.Granted)
	}
	sh.stranded += l.m.Landed(&e.st, id, now, g)
}

// returnLater gives credits back to the store in the background.
// Called with a shard locked (see Close's barrier).
func (l *Limiter) returnLater(r returned) {
	if l.closed.Load() {
		return
	}
	l.wg.Add(1)
	l.bgWork.start()
	go func() {
		defer l.wg.Done()
		defer l.bgWork.done()
		ctx, cancel := context.WithTimeout(l.bg, l.timeout)
		defer cancel()
		if err := l.store.Return(ctx, r.key, l.rule, r.Credits, r.WindowEnd, r.At); err != nil {
			l.counters.storeErrors.Add(1)
			return
		}
		l.counters.creditsReturned.Add(r.Credits)
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
	var dropped int
	rs := l.l1.drain(l, func(e *entry) bool {
		idle := l.m.Idle(&e.st, now)
		if idle {
			dropped++
		}
		return idle
	}, now)
	for _, r := range rs {
		_ = l.returnToStore(ctx, r.key, r.Return) // a failed return only under-admits
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
