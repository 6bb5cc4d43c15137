package gale_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

var t0 = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

func randomRule(rng *rand.Rand) gale.Rule {
	algos := []gale.Algorithm{gale.FixedWindow, gale.SlidingWindow, gale.GCRA, gale.TokenBucket, gale.Quota}
	r := gale.Rule{Algorithm: algos[rng.IntN(len(algos))], Limit: 1 + rng.Int64N(50)}
	switch r.Algorithm {
	case gale.Quota:
		r.Calendar = gale.Calendar(1 + rng.IntN(4))
	default:
		r.Period = time.Duration(1+rng.Int64N(5_000_000)) * time.Microsecond
	}
	if r.Algorithm == gale.GCRA || r.Algorithm == gale.TokenBucket {
		r.Burst = rng.Int64N(60)
	}
	return r
}

func step(rng *rand.Rand, r gale.Rule) int64 {
	span := int64(r.Period / time.Microsecond)
	if r.Algorithm == gale.Quota {
		span = int64(24 * time.Hour / time.Microsecond)
	}
	if rng.IntN(4) == 0 {
		return 0
	}
	return rng.Int64N(span/3 + 1)
}

// TestTakeProperties checks, for random rules and schedules: a denial changes
// nothing; Remaining is what a check at the same instant finds; a cost within
// capacity fits exactly RetryAfter later and not a microsecond earlier (for
// the strategies that refill continuously); and no window ever admits more
// than Limit.
func TestTakeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 400; trial++ {
		r := randomRule(rng)
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		var s gale.State
		now := t0
		perWindow := map[int64]int64{}
		for i := 0; i < 300; i++ {
			now += step(rng, r)
			cost := 1 + rng.Int64N(r.Capacity()+1)
			next, o := r.Take(s, now, cost, cost)
			if o.Granted == 0 {
				if next != s {
					t.Fatalf("%v: denial changed state %+v → %+v", r, s, next)
				}
				if o.RetryAfter <= 0 {
					t.Fatalf("%v: denial with retry after %d", r, o.RetryAfter)
				}
				if cost <= r.Capacity() {
					if _, o2 := r.Take(s, now+o.RetryAfter, cost, cost); o2.Granted != cost {
						t.Fatalf("%v: cost %d not admitted at now+RetryAfter (%dµs); remaining %d", r, cost, o.RetryAfter, o2.Remaining)
					}
					if r.Algorithm != gale.FixedWindow && r.Algorithm != gale.Quota && o.RetryAfter > 1 {
						if _, o3 := r.Take(s, now+o.RetryAfter-1, cost, cost); o3.Granted != 0 {
							t.Fatalf("%v: retry after %dµs is not the first instant", r, o.RetryAfter)
						}
					}
				}
				continue
			}
			if o.Granted != cost {
				t.Fatalf("%v: granted %d of cost %d", r, o.Granted, cost)
			}
			// A take above capacity is always denied and reports what is available.
			if _, peek := r.Take(next, now, r.Capacity()+1, r.Capacity()+1); peek.Remaining != o.Remaining {
				t.Fatalf("%v: Remaining %d but a check at once sees %d", r, o.Remaining, peek.Remaining)
			}
			s = next
			if r.Windowed() {
				ws, _ := r.WindowBounds(now)
				perWindow[ws] += cost
				if perWindow[ws] > r.Limit {
					t.Fatalf("%v: window %d admitted %d > limit", r, ws, perWindow[ws])
				}
			}
		}
	}
}

// TestFixedWindowAgainstLog checks the fixed window against a naive log of
// every admission.
func TestFixedWindowAgainstLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 17, Period: 250 * time.Millisecond}
	p := int64(r.Period / time.Microsecond)
	type admission struct{ at, n int64 }
	var log []admission
	var s gale.State
	now := t0
	for i := 0; i < 20000; i++ {
		now += rng.Int64N(20000)
		cost := 1 + rng.Int64N(5)
		ws := now - now%p
		var used int64
		for _, a := range log {
			if a.at >= ws && a.at < ws+p {
				used += a.n
			}
		}
		want := used+cost <= r.Limit
		next, o := r.Take(s, now, cost, cost)
		if (o.Granted > 0) != want {
			t.Fatalf("step %d: granted %d, naive says %v (used %d)", i, o.Granted, want, used)
		}
		if want {
			log = append(log, admission{now, cost})
			s = next
		}
	}
}

// TestGCRAEqualsTokenBucket: with a whole-microsecond emission interval and
// time steps that are multiples of it, GCRA and the token bucket are the same
// limiter written two ways.
func TestGCRAEqualsTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for trial := 0; trial < 200; trial++ {
		limit := 1 + rng.Int64N(40)
		interval := 1 + rng.Int64N(100000)
		burst := rng.Int64N(50)
		g := gale.Rule{Algorithm: gale.GCRA, Limit: limit, Period: time.Duration(interval*limit) * time.Microsecond, Burst: burst}
		b := g
		b.Algorithm = gale.TokenBucket
		var sg, sb gale.State
		now := t0
		for i := 0; i < 500; i++ {
			now += interval * rng.Int64N(4)
			cost := 1 + rng.Int64N(g.Capacity()+1)
			var og, ob gale.Outcome
			sg, og = g.Take(sg, now, cost, cost)
			sb, ob = b.Take(sb, now, cost, cost)
			if og.Granted != ob.Granted || og.Remaining != ob.Remaining || og.RetryAfter != ob.RetryAfter || og.ResetAt != ob.ResetAt {
				t.Fatalf("trial %d step %d (%v): gcra %+v, token bucket %+v", trial, i, g, og, ob)
			}
		}
	}
}

// TestGiveRestores: taking n and giving n back in the same window restores
// what was available (windows and token bucket exactly; GCRA never gives back
// more than was taken).
func TestGiveRestores(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for trial := 0; trial < 2000; trial++ {
		r := randomRule(rng)
		now := t0 + rng.Int64N(1e12)
		s, o := r.Take(gale.State{}, now, 1, 1+rng.Int64N(r.Capacity()))
		if o.Granted == 0 {
			t.Fatalf("%v: fresh take denied", r)
		}
		before := o.Remaining + o.Granted
		s2, changed := r.Give(s, now, o.Granted, o.WindowEnd)
		if !changed {
			t.Fatalf("%v: give changed nothing", r)
		}
		_, peek := r.Take(s2, now, r.Capacity()+1, r.Capacity()+1)
		after := peek.Remaining
		exact := r.Algorithm != gale.GCRA
		if after > before || (exact && after != before) || after < before-1 {
			t.Fatalf("%v: available %d before take, %d after give", r, before, after)
		}
		if r.Windowed() {
			if _, changed := r.Give(s, now, 1, o.WindowEnd-1); changed {
				t.Fatalf("%v: give to another window changed the state", r)
			}
		}
	}
}

func TestCalendarBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 5000; i++ {
		now := t0 + rng.Int64N(int64(40*365*24*time.Hour/time.Microsecond))
		tm := time.UnixMicro(now).UTC()
		for c := gale.Day; c <= gale.Year; c++ {
			start, end := gale.Rule{Algorithm: gale.Quota, Limit: 1, Calendar: c}.WindowBounds(now)
			s, e := time.UnixMicro(start).UTC(), time.UnixMicro(end).UTC()
			if now < start || now >= end {
				t.Fatalf("%v: %v not in [%v, %v)", c, tm, s, e)
			}
			var want time.Time
			y, m, d := tm.Date()
			switch c {
			case gale.Day:
				want = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
			case gale.Week:
				back := (int(tm.Weekday()) + 6) % 7
				want = time.Date(y, m, d-back, 0, 0, 0, 0, time.UTC)
			case gale.Month:
				want = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
			case gale.Year:
				want = time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
			}
			if !s.Equal(want) {
				t.Fatalf("%v of %v starts %v, want %v", c, tm, s, want)
			}
		}
	}
}

func TestRuleValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule gale.Rule
		ok   bool
	}{
		{"fixed", gale.Rule{Algorithm: gale.FixedWindow, Limit: 1, Period: time.Second}, true},
		{"quota", gale.Rule{Algorithm: gale.Quota, Limit: 1, Calendar: gale.Month}, true},
		{"gcra burst", gale.Rule{Algorithm: gale.GCRA, Limit: 1, Period: time.Second, Burst: 9}, true},
		{"zero", gale.Rule{}, false},
		{"zero limit", gale.Rule{Algorithm: gale.FixedWindow, Period: time.Second}, false},
		{"huge limit", gale.Rule{Algorithm: gale.FixedWindow, Limit: gale.MaxLimit + 1, Period: time.Second}, false},
		{"sub-µs period", gale.Rule{Algorithm: gale.FixedWindow, Limit: 1, Period: 1500 * time.Nanosecond}, false},
		{"burst on a window", gale.Rule{Algorithm: gale.FixedWindow, Limit: 1, Period: time.Second, Burst: 2}, false},
		{"quota without calendar", gale.Rule{Algorithm: gale.Quota, Limit: 1}, false},
		{"quota with period", gale.Rule{Algorithm: gale.Quota, Limit: 1, Calendar: gale.Day, Period: time.Hour}, false},
		{"calendar on gcra", gale.Rule{Algorithm: gale.GCRA, Limit: 1, Period: time.Second, Calendar: gale.Day}, false},
		{"negative burst", gale.Rule{Algorithm: gale.TokenBucket, Limit: 1, Period: time.Second, Burst: -1}, false},
		{"bucket refilling for centuries", gale.Rule{Algorithm: gale.GCRA, Limit: 1, Period: 24 * time.Hour, Burst: 1 << 20}, false},
		{"bucket refilling within bounds", gale.Rule{Algorithm: gale.TokenBucket, Limit: 1, Period: 24 * time.Hour, Burst: 365}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.rule.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
