package gale_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestResetAtIsWhenTheFullLimitIsBack: after an admission, ResetAt is the
// first instant at which a check finds the whole capacity available again,
// when nothing else is taken meanwhile — for a sliding window that is the
// end of the next window, up to two periods away.
func TestResetAtIsWhenTheFullLimitIsBack(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	available := func(r gale.Rule, s gale.State, at int64) int64 {
		_, peek := r.Take(s, at, r.Capacity()+1, r.Capacity()+1)
		return peek.Remaining
	}
	for trial := 0; trial < 400; trial++ {
		r := randomRule(rng)
		var s gale.State
		now := t0
		for i := 0; i < 100; i++ {
			now += step(rng, r)
			cost := 1 + rng.Int64N(r.Capacity())
			next, o := r.Take(s, now, cost, cost)
			if o.Granted == 0 {
				continue
			}
			s = next
			if got := available(r, s, o.ResetAt); got != r.Capacity() {
				t.Fatalf("%v: admitted %d at %d; at ResetAt (+%dµs) %d of %d are available", r, cost, now, o.ResetAt-now, got, r.Capacity())
			}
			if got := available(r, s, o.ResetAt-1); got == r.Capacity() {
				t.Fatalf("%v: admitted %d at %d; the full capacity is back before ResetAt (+%dµs)", r, cost, now, o.ResetAt-now)
			}
		}
	}
}

// hintModes are the limiter configurations the hint properties run in.
var hintModes = []struct {
	name  string
	mode  gale.Mode
	lease gale.LeaseConfig
}{
	{"strict", gale.Strict, gale.LeaseConfig{}},
	{"cached_deny", gale.CachedDeny, gale.LeaseConfig{}},
	{"leased", gale.Leased, gale.LeaseConfig{}},
	{"leased_uncoupled", gale.Leased, gale.LeaseConfig{Uncoupled: true}},
}

// TestRetryAfterAndRemainingInEveryMode: one client on one key, no other
// traffic, every algorithm and mode. A denied check of cost c is admitted
// when retried exactly RetryAfter later and denied a microsecond earlier;
// no decision reports more Remaining than the rule's capacity. Leased, a
// check that holds fewer credits than its cost asks the store for the rest;
// window-coupled, those credits die at their window's end, which a sliding
// window's retry can fall after.
func TestRetryAfterAndRemainingInEveryMode(t *testing.T) {
	s := memstore.New()
	retryProperty(t, func() gale.Store { return s }, 60)
}

// TestRetryAfterAndRemainingInEveryModeRedis is the same over real Redis.
func TestRetryAfterAndRemainingInEveryModeRedis(t *testing.T) {
	s, _ := newRedisStore(t)
	retryProperty(t, func() gale.Store { return s }, 15)
}

func retryProperty(t *testing.T, store func() gale.Store, trials int) {
	for _, m := range hintModes {
		t.Run(m.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(17, uint64(m.mode)))
			for trial := 0; trial < trials; trial++ {
				r := randomRule(rng)
				lease := m.lease
				lease.Batch = 1 + rng.Int64N(r.Capacity()) // leased modes only
				l := newLimiter(t, store(), gale.Config{Rule: r, Mode: m.mode, Lease: lease})
				key := fmt.Sprintf("%s/%d", t.Name(), trial)
				now := start
				check := func(cost int64, at time.Time) gale.Decision {
					t.Helper()
					d := mustCheck(t, l, key, cost, at)
					if d.Remaining < 0 || d.Remaining > r.Capacity() {
						t.Fatalf("%v: cost %d at %v: remaining %d outside 0..%d", r, cost, at.Sub(start), d.Remaining, r.Capacity())
					}
					return d
				}
				for i := 0; i < 150; i++ {
					now = now.Add(time.Duration(step(rng, r)) * time.Microsecond)
					cost := 1 + rng.Int64N(r.Capacity())
					d := check(cost, now)
					if d.Allowed {
						continue
					}
					if d.RetryAfter <= 0 {
						t.Fatalf("%v: cost %d denied at %v with retry after %v", r, cost, now.Sub(start), d.RetryAfter)
					}
					retry := now.Add(d.RetryAfter)
					if d.RetryAfter > time.Microsecond && check(cost, retry.Add(-time.Microsecond)).Allowed {
						t.Fatalf("%v: cost %d denied at %v with retry after %v, admitted a microsecond earlier", r, cost, now.Sub(start), d.RetryAfter)
					}
					if !check(cost, retry).Allowed {
						t.Fatalf("%v: cost %d denied at %v with retry after %v, denied again then", r, cost, now.Sub(start), d.RetryAfter)
					}
					now = retry
				}
			}
		})
	}
}

// TestLeasedRemainingWithinCapacity: a leased node reports at most the
// rule's capacity remaining. GCRA 100/s with a burst of 20, batch 10, low
// water 2: a refill lands 8 credits while the store, idle for a second, is
// full again; the node then holds 10 credits and the store has 12 left.
// Counting both, it used to report 21 (22 before serving).
func TestLeasedRemainingWithinCapacity(t *testing.T) {
	r := gale.Rule{Algorithm: gale.GCRA, Limit: 100, Period: time.Second, Burst: 20}
	l := newLimiter(t, memstore.New(), gale.Config{Rule: r, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10, LowWater: 2}})
	for i := 0; i < 7; i++ { // a lease of 10, 3 credits left: above the low water
		if d := mustCheck(t, l, "k", 1, start); !d.Allowed || d.Remaining > r.Capacity() {
			t.Fatalf("check %d: %+v", i, d)
		}
		settle(t, l)
	}
	later := start.Add(time.Second)
	mustCheck(t, l, "k", 1, later) // 2 credits left: a refill of 8 starts
	if settle(t, l); l.Stats().LeasesRequested != 2 {
		t.Fatalf("no low-water refill landed: %+v", l.Stats())
	}
	if d := mustCheck(t, l, "k", 1, later); !d.Allowed || d.Remaining > r.Capacity() {
		t.Fatalf("after the refill: allowed %v, remaining %d > capacity %d", d.Allowed, d.Remaining, r.Capacity())
	}
}
