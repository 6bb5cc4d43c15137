package gale_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

func (c *countingStore) Charge(ctx context.Context, key string, r gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	c.charges.Add(1)
	if c.failing.Load() {
		return gale.Decision{}, errDown
	}
	return c.Store.Charge(ctx, key, r, n, now)
}

// TestChargeProperties checks Rule.Charge on random rules and schedules of
// takes and charges: a charge that fits is Take, state and outcome; one
// that does not is counted all the same; a check-only charge changes
// nothing; and on a fixed window or a quota every answer is
// envoyproxy/ratelimit's, from a naive counter (count += n; OVER_LIMIT iff
// count > limit; remaining = limit − count, at least 0).
func TestChargeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	for trial := 0; trial < 400; trial++ {
		r := randomRule(rng)
		var s gale.State
		now := t0
		var count, window int64 // the naive counter of a fixed window or quota
		for i := 0; i < 300; i++ {
			now += step(rng, r)
			if ws, _ := r.WindowBounds(now); r.Windowed() && ws != window {
				window, count = ws, 0
			}
			if rng.IntN(3) == 0 {
				cost := 1 + rng.Int64N(r.Capacity())
				next, o := r.Take(s, now, cost, cost)
				if o.Granted > 0 {
					count += cost
				}
				s = next
				continue
			}
			var n int64
			switch rng.IntN(3) {
			case 0:
			case 1:
				n = 1 + rng.Int64N(r.Capacity())
			default:
				n = 1 + rng.Int64N(3*r.Capacity())
			}
			_, avail := r.Take(s, now, gale.MaxLimit, gale.MaxLimit) // a denial: what is available
			next, o := r.Charge(s, now, n)
			if n <= avail.Remaining && (n > 0 || !o.Over) {
				tn, to := r.Take(s, now, n, n)
				if n == 0 {
					tn, to = s, gale.Outcome{Remaining: avail.Remaining, ResetAt: avail.ResetAt, WindowEnd: avail.WindowEnd, ExpireAt: avail.ExpireAt}
				}
				if o.Over || o.Overrun != 0 || next != tn || o.Remaining != to.Remaining || o.ResetAt != to.ResetAt || o.WindowEnd != to.WindowEnd || (n > 0 && o.ExpireAt != to.ExpireAt) {
					t.Fatalf("%v at %d: charge %d that fits: %+v → %+v, want Take's %+v → %+v", r, now, n, o, next, to, tn)
				}
			}
			if n > avail.Remaining && (!o.Over || o.Overrun < 1 || o.Overrun > n || o.Remaining != 0 || o.RetryAfter <= 0) {
				t.Fatalf("%v at %d: charge %d of %d available: %+v", r, now, n, avail.Remaining, o)
			}
			if n == 0 && next != s {
				t.Fatalf("%v: a check-only charge changed the state %+v → %+v", r, s, next)
			}
			if r.Algorithm == gale.FixedWindow || r.Algorithm == gale.Quota {
				count += n
				if o.Over != (count > r.Limit) || o.Remaining != max(r.Limit-count, 0) {
					t.Fatalf("%v at %d: charge %d brings the count to %d: over %v remaining %d", r, now, n, count, o.Over, o.Remaining)
				}
				if wantOverrun := min(n, max(count-r.Limit, 0)); o.Over && n > 0 && o.Overrun != wantOverrun {
					t.Fatalf("%v: charge %d to %d of %d: overrun %d, want %d", r, n, count, r.Limit, o.Overrun, wantOverrun)
				}
			}
			if o.Over {
				// A check-only charge at the retry instant fits, and not a
				// microsecond before it.
				at := now + o.RetryAfter
				if _, po := r.Charge(next, at, 0); po.Over {
					t.Fatalf("%v: check-only at the retry instant %d is still over: %+v", r, at, po)
				}
				if _, po := r.Charge(next, at-1, 0); !po.Over && o.RetryAfter > 1 {
					t.Fatalf("%v: check-only a µs before the retry instant fits", r)
				}
			}
			s = next
		}
	}
}

// TestLimiterChargeModes walks check-then-charge through each mode on the
// memory store: the answers are envoyproxy/ratelimit's, a cached_deny or
// leased node remembers an overrun (no store call answers the check-only
// calls after it), and a leased charge within the node's credits asks the
// store nothing.
func TestLimiterChargeModes(t *testing.T) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Hour}
	for _, tc := range []struct {
		name string
		cfg  gale.Config
	}{
		{"strict", gale.Config{Rule: rule}},
		{"cached_deny", gale.Config{Rule: rule, Mode: gale.CachedDeny}},
		{"leased", gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4}}},
		{"leased_uncoupled", gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4, Uncoupled: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &countingStore{Store: memstore.New()}
			l := newLimiter(t, store, tc.cfg)
			now := storetest.Timeline()
			calls := func() int64 { return store.checks.Load() + store.leases.Load() + store.charges.Load() }
			charge := func(step string, n int64, allowed bool, remaining, overrun int64) gale.Decision {
				t.Helper()
				d, err := l.Charge(bg, "k", n, now)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if d.Allowed != allowed || d.Remaining != remaining || d.Overrun != overrun {
					t.Fatalf("%s: allowed %v remaining %d overrun %d, want %v %d %d (%+v)", step, d.Allowed, d.Remaining, d.Overrun, allowed, remaining, overrun, d)
				}
				return d
			}
			charge("check-only, fresh", 0, true, 10, 0)
			charge("charge 3", 3, true, 7, 0)
			before := calls()
			charge("charge 1", 1, true, 6, 0)
			if tc.cfg.Mode == gale.Leased && calls() != before {
				t.Fatalf("a charge within the node's credits asked the store")
			}
			charge("charge 6 reaches the limit", 6, true, 0, 0)
			charge("check-only at the limit", 0, true, 0, 0)
			d := charge("charge 4 overruns", 4, false, 0, 4)
			if d.RetryAfter != time.Hour {
				t.Fatalf("an overrun's retry: %v, want the window's end", d.RetryAfter)
			}
			before = calls()
			charge("check-only after the overrun", 0, false, 0, 0)
			if remembered := tc.cfg.Mode != gale.Strict; remembered != (calls() == before) {
				t.Fatalf("check-only after an overrun: %d store calls (mode %v)", calls()-before, tc.cfg.Mode)
			}
			if c, err := l.Check(bg, "k", 1, now); err != nil || c.Allowed || c.RetryAfter != time.Hour {
				t.Fatalf("a check after the overrun: %+v %v", c, err)
			}
			before = calls()
			charge("a charge is still counted", 2, false, 0, 2)
			if calls() == before {
				t.Fatal("a charge after an overrun was answered from memory: it must be counted")
			}
			if got, _ := store.Store.Charge(bg, "k", rule, 0, now); got.Allowed {
				t.Fatalf("the store does not stand past the limit: %+v", got)
			}
			now = now.Add(time.Hour)
			charge("the next window", 0, true, 10, 0)
		})
	}
}

// TestChargeRejectsBadUnits: a charge outside 0..MaxLimit is the caller's
// error, in every mode.
func TestChargeRejectsBadUnits(t *testing.T) {
	for _, m := range []gale.Mode{gale.Strict, gale.CachedDeny, gale.Leased} {
		l := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(5), Mode: m})
		for _, n := range []int64{-1, gale.MaxLimit + 1} {
			if _, err := l.Charge(bg, "k", n, storetest.Timeline()); err == nil {
				t.Errorf("%v: charge %d accepted", m, n)
			}
			if _, err := l.ChargeBytes(bg, []byte("k"), n, storetest.Timeline()); err == nil {
				t.Errorf("%v: charge %d of bytes accepted", m, n)
			}
		}
	}
}
