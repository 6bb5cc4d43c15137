package gale_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// takeAll takes as many units as r admits at now, one Take of 1..capacity.
func takeAll(r gale.Rule, s gale.State, now int64) (gale.State, int64) {
	next, o := r.Take(s, now, 1, r.Capacity())
	return next, o.Granted
}

// TestFiguresChangeKeepTheState walks a key across a change of its rule's
// figures (a reload that changes requests_per_unit or burst): what the old
// rule stored is read by the new one, never as more room than it held.
func TestFiguresChangeKeepTheState(t *testing.T) {
	const ms = int64(time.Millisecond / time.Microsecond)
	day := gale.Rule{Algorithm: gale.FixedWindow, Limit: 500, Period: 24 * time.Hour}
	bucket := gale.Rule{Algorithm: gale.TokenBucket, Limit: 50, Period: time.Second, Burst: 100}
	gcra := gale.Rule{Algorithm: gale.GCRA, Limit: 100, Period: time.Second, Burst: 100}
	with := func(r gale.Rule, limit, burst int64) gale.Rule { r.Limit, r.Burst = limit, burst; return r }

	t.Run("window count above a lowered limit denies", func(t *testing.T) {
		s, o := day.Take(gale.State{}, t0, 400, 400)
		if o.Granted != 400 {
			t.Fatal(o)
		}
		if _, o := with(day, 300, 0).Take(s, t0+1, 1, 1); o.Granted != 0 || o.Remaining != 0 {
			t.Fatalf("400 counted, limit lowered to 300: %+v, want a denial", o)
		}
		if _, n := takeAll(with(day, 600, 0), s, t0+1); n != 200 {
			t.Fatalf("400 counted, limit raised to 600: %d more, want 200", n)
		}
	})
	t.Run("token bucket shrunk from 100 to 99 is not refilled", func(t *testing.T) {
		s, n := takeAll(bucket, gale.State{}, t0)
		if n != 100 {
			t.Fatalf("a fresh bucket gave %d, want 100", n)
		}
		small := with(bucket, 50, 99)
		total := int64(0)
		for at := t0; at <= t0+2000*ms; at += 10 * ms {
			var got int64
			s, got = takeAll(small, s, at)
			total += got
		}
		// Empty at t0, refilled at 50/s: 100 in 2 s, not 99 more on top.
		if total > 100 {
			t.Fatalf("the emptied bucket gave %d in 2s after its burst shrank to 99, want ≤ 100 (50/s)", total)
		}
	})
	t.Run("token bucket full at the shrink holds the new burst", func(t *testing.T) {
		s, _ := bucket.Take(gale.State{}, t0, 1, 1) // 99 left; the same instant follows
		s, _ = with(bucket, 50, 100).Give(s, t0, 1, 0)
		small := with(bucket, 50, 10)
		s, n := takeAll(small, s, t0)
		_, m := takeAll(small, s, t0)
		if n+m != 10 {
			t.Fatalf("a full bucket shrunk to 10 gave %d then %d at the same instant, want 10 in all", n, m)
		}
	})
	t.Run("gcra keeps its level when the rate falls", func(t *testing.T) {
		s, n := takeAll(gcra, gale.State{}, t0)
		if n != 100 {
			t.Fatal(n)
		}
		slow := with(gcra, 10, 100) // 100 units drain in 10 s now
		_, o := slow.Take(s, t0+500*ms, 1, 100)
		if o.Granted != 5 {
			t.Fatalf("0.5s after emptying at 100/s, at 10/s: %d admitted, want 5 (the level drains at the new rate)", o.Granted)
		}
		if _, o := slow.Take(s, t0, 1, 1); o.RetryAfter != 100*ms {
			t.Fatalf("retry after %dµs, want %dµs (one unit at 10/s)", o.RetryAfter, 100*ms)
		}
	})
	t.Run("gcra keeps its level when the rate rises", func(t *testing.T) {
		s, _ := takeAll(gcra, gale.State{}, t0)
		fast := with(gcra, 1000, 100)
		if _, o := fast.Take(s, t0, 1, 1); o.RetryAfter != 1*ms {
			t.Fatalf("retry after %dµs, want %dµs (one unit at 1000/s)", o.RetryAfter, 1*ms)
		}
		if _, n := takeAll(fast, s, t0+50*ms); n != 50 {
			t.Fatalf("50ms later at 1000/s: %d, want 50", n)
		}
	})
	t.Run("gcra shrunk below its level drains first", func(t *testing.T) {
		s, _ := takeAll(gcra, gale.State{}, t0)
		small := with(gcra, 100, 10)
		_, o := small.Take(s, t0, 1, 1)
		if o.Granted != 0 || o.RetryAfter != 910*ms {
			t.Fatalf("%+v: want a denial until the level of 100 is down to 9 (910ms at 100/s)", o)
		}
	})
}

// TestFiguresChangeHoldTheNewBound: a bucket (GCRA or token bucket) whose
// limit and burst change at tc, in any state, admits at most
// Burst' + Limit'·(t−tc)/Period in [tc, t] under the new figures: the bound of
// a fresh bucket, which a change never exceeds.
func TestFiguresChangeHoldTheNewBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	for trial := 0; trial < 2000; trial++ {
		algo := gale.GCRA
		if trial%2 == 1 {
			algo = gale.TokenBucket
		}
		period := time.Duration(1+rng.Int64N(2_000_000)) * time.Microsecond
		old := gale.Rule{Algorithm: algo, Limit: 1 + rng.Int64N(200), Period: period}
		old.Burst = rng.Int64N(2 * old.Limit)
		nr := old
		nr.Limit, nr.Burst = 1+rng.Int64N(200), rng.Int64N(400)
		if old.Validate() != nil || nr.Validate() != nil {
			continue
		}
		p := int64(period / time.Microsecond)
		var s gale.State
		now := t0
		for i := 0; i < 1+rng.IntN(20); i++ {
			now += rng.Int64N(p/2 + 1)
			cost := 1 + rng.Int64N(old.Capacity())
			s, _ = old.Take(s, now, 1, cost)
		}
		tc := now + rng.Int64N(p+1)
		var total int64
		for at := tc; at < tc+3*p; at += rng.Int64N(p/4 + 1) {
			var n int64
			s, n = takeAll(nr, s, at)
			total += n
			if bound := nr.Capacity() + (at-tc)*nr.Limit/p; total > bound {
				t.Fatalf("trial %d: %v changed to %v at %d: %d admitted by %d, above %d", trial, old, nr, tc, total, at, bound)
			}
		}
	}
}
