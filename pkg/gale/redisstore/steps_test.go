package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// timeline returns a start instant for fixed-timeline tests: a UTC midnight
// at least a day after the real time, so it sits on every window boundary up
// to a day and Redis (which expires keys by its own clock) never drops live
// state. Test times only move forward from it.
func timeline() time.Time {
	return time.Now().UTC().Add(48 * time.Hour).Truncate(24 * time.Hour)
}

// step is one operation on a fixed timeline and what it must answer.
type step struct {
	name    string
	advance time.Duration // moves the clock before the operation
	op      string        // "check", "lease" or "return"
	n, max  int64         // check: cost; lease: min and max; return: credits
	lease   int           // return: into the window of this earlier lease (0-based)

	// The answer of a check or lease.
	allowed   bool          // a lease is allowed when granted > 0
	granted   int64         // lease
	remaining int64         //
	retry     time.Duration // when denied
	reset     time.Duration // ResetAt − now
}

// walk runs steps against key of s from t0.
func walk(t *testing.T, s gale.Store, rule gale.Rule, t0 time.Time, steps []step) {
	t.Helper()
	ctx := context.Background()
	key := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	now := t0
	var leases []gale.Grant
	for i, st := range steps {
		now = now.Add(st.advance)
		where := fmt.Sprintf("step %d %q at t0+%v", i, st.name, now.Sub(t0))
		var d gale.Decision
		switch st.op {
		case "check":
			var err error
			if d, err = s.Check(ctx, key, rule, st.n, now); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
		case "lease":
			g, err := s.Lease(ctx, key, rule, st.n, st.max, now)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if g.Granted != st.granted || !g.Now.Equal(now) {
				t.Fatalf("%s: granted %d at %v, want %d at %v", where, g.Granted, g.Now, st.granted, now)
			}
			_, we := rule.WindowBounds(now.UnixMicro())
			if rule.Windowed() && !g.WindowEnd.Equal(time.UnixMicro(we)) || !rule.Windowed() && !g.WindowEnd.IsZero() {
				t.Fatalf("%s: window end %v (reset at %v)", where, g.WindowEnd, g.Decision.ResetAt)
			}
			leases = append(leases, g)
			d = g.Decision
		case "return":
			if err := s.Return(ctx, key, rule, st.n, leases[st.lease].WindowEnd, now); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			continue
		default:
			t.Fatalf("%s: unknown op %q", where, st.op)
		}
		var retry time.Duration
		if !st.allowed {
			retry = st.retry
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining || d.RetryAfter != retry || d.Limit != rule.Limit {
			t.Fatalf("%s: allowed=%v remaining=%d retry=%v limit=%d, want allowed=%v remaining=%d retry=%v",
				where, d.Allowed, d.Remaining, d.RetryAfter, d.Limit, st.allowed, st.remaining, retry)
		}
		if got := d.ResetAt.Sub(now); got != st.reset {
			t.Fatalf("%s: reset in %v, want %v", where, got, st.reset)
		}
	}
}

const (
	us = time.Microsecond
	ms = time.Millisecond
	s1 = time.Second
)

func TestFixedWindowSteps(t *testing.T) {
	st, _ := newStore(t, redisstore.Options{})
	walk(t, st, gale.Rule{Algorithm: gale.FixedWindow, Limit: 5, Period: time.Minute}, timeline(), []step{
		{name: "take 2", op: "check", n: 2, allowed: true, remaining: 3, reset: time.Minute},
		{name: "lease up to 2", advance: 10 * s1, op: "lease", n: 1, max: 2, allowed: true, granted: 2, remaining: 1, reset: 50 * s1},
		{name: "cost 2 > 1 left is denied whole", op: "check", n: 2, remaining: 1, retry: 50 * s1, reset: 50 * s1},
		{name: "the denial consumed nothing", op: "check", n: 1, allowed: true, remaining: 0, reset: 50 * s1},
		{name: "lease denied", op: "lease", n: 1, max: 3, remaining: 0, retry: 50 * s1, reset: 50 * s1},
		{name: "return 2 of lease 0", op: "return", n: 2, lease: 0},
		{name: "returned units are taken again", op: "check", n: 2, allowed: true, remaining: 0, reset: 50 * s1},
		{name: "return more than held: floors at 0", op: "return", n: 100, lease: 0},
		{name: "all 5 back", op: "check", n: 5, allowed: true, remaining: 0, reset: 50 * s1},
		{name: "1µs before the boundary", advance: 50*s1 - us, op: "check", n: 1, remaining: 0, retry: us, reset: us},
		{name: "new window", advance: us, op: "lease", n: 1, max: 3, allowed: true, granted: 3, remaining: 2, reset: time.Minute},
		{name: "return into the ended window", op: "return", n: 2, lease: 0},
		{name: "changed nothing", op: "check", n: 3, remaining: 2, retry: time.Minute, reset: time.Minute},
		{name: "return into this window", op: "return", n: 2, lease: 2},
		{name: "changed the count", op: "check", n: 4, allowed: true, remaining: 0, reset: time.Minute},
		{name: "cost above the limit", op: "check", n: 6, remaining: 0, retry: time.Minute, reset: time.Minute},
	})
}

func TestSlidingWindowSteps(t *testing.T) {
	st, _ := newStore(t, redisstore.Options{})
	walk(t, st, gale.Rule{Algorithm: gale.SlidingWindow, Limit: 10, Period: time.Minute}, timeline(), []step{
		// The 10 weigh in until the next window has ended too.
		{name: "take 10", op: "check", n: 10, allowed: true, remaining: 0, reset: 2 * time.Minute},
		// The previous window weighs 10·60/60: 5 fit once half of it slid
		// out, all 10 once all of it has.
		{name: "next window", advance: time.Minute, op: "check", n: 5, remaining: 0, retry: 30 * s1, reset: time.Minute},
		{name: "half slid out", advance: 30 * s1, op: "lease", n: 1, max: 8, allowed: true, granted: 5, remaining: 0, reset: 90 * s1},
		{name: "return 2", op: "return", n: 2, lease: 0},
		{name: "returned units fit", op: "check", n: 2, allowed: true, remaining: 0, reset: 90 * s1},
		// 10·15/60 + 5 = 7.5: 2 fit now, 3 once the estimate is 7 (10·12/60 + 5), 3 s on.
		{name: "three quarters slid out", advance: 15 * s1, op: "check", n: 3, remaining: 2, retry: 3 * s1, reset: 75 * s1},
		{name: "one of two", op: "check", n: 1, allowed: true, remaining: 1, reset: 75 * s1},
		{name: "cost above the limit: the end of the next window", op: "check", n: 11, remaining: 1, retry: 75 * s1, reset: 75 * s1},
		// previous = 6, current = 0; then 6·(60−t)/60 + 4 ≤ 9 from t = 10 s.
		{name: "the window after", advance: 15 * s1, op: "check", n: 4, allowed: true, remaining: 0, reset: 2 * time.Minute},
		{name: "return into an ended window", op: "return", n: 5, lease: 0},
		{name: "changed nothing", op: "check", n: 1, remaining: 0, retry: 10 * s1, reset: 2 * time.Minute},
	})
}

func TestGCRASteps(t *testing.T) {
	st, _ := newStore(t, redisstore.Options{})
	// Emission interval 100ms.
	walk(t, st, gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second, Burst: 5}, timeline(), []step{
		{name: "burst", op: "check", n: 5, allowed: true, remaining: 0, reset: 500 * ms},
		{name: "over", op: "check", n: 1, remaining: 0, retry: 100 * ms, reset: 500 * ms},
		{name: "cost 3", op: "check", n: 3, remaining: 0, retry: 300 * ms, reset: 500 * ms},
		{name: "lease denied", op: "lease", n: 1, max: 5, remaining: 0, retry: 100 * ms, reset: 500 * ms},
		{name: "one interval later", advance: 100 * ms, op: "lease", n: 1, max: 5, allowed: true, granted: 1, remaining: 0, reset: 500 * ms},
		{name: "return it", op: "return", n: 1, lease: 1},
		{name: "taken again", op: "check", n: 1, allowed: true, remaining: 0, reset: 500 * ms},
		{name: "idle refills to the burst", advance: s1, op: "check", n: 1, allowed: true, remaining: 4, reset: 100 * ms},
		{name: "cost above the burst", op: "check", n: 6, remaining: 4, retry: 100 * ms, reset: 100 * ms},
		{name: "return more than taken: floors at now", op: "return", n: 10, lease: 1},
		{name: "whole burst", op: "check", n: 5, allowed: true, remaining: 0, reset: 500 * ms},
	})
}

func TestTokenBucketSteps(t *testing.T) {
	st, _ := newStore(t, redisstore.Options{})
	walk(t, st, gale.Rule{Algorithm: gale.TokenBucket, Limit: 10, Period: time.Second, Burst: 5}, timeline(), []step{
		{name: "empty the bucket", op: "check", n: 5, allowed: true, remaining: 0, reset: 500 * ms},
		{name: "one token in 100ms", op: "check", n: 1, remaining: 0, retry: 100 * ms, reset: 500 * ms},
		{name: "lease it", advance: 100 * ms, op: "lease", n: 1, max: 3, allowed: true, granted: 1, remaining: 0, reset: 500 * ms},
		{name: "return it", op: "return", n: 1, lease: 0},
		{name: "taken again", op: "check", n: 1, allowed: true, remaining: 0, reset: 500 * ms},
		{name: "2.5 tokens", advance: 250 * ms, op: "check", n: 3, remaining: 2, retry: 50 * ms, reset: 250 * ms},
		{name: "take 2", op: "check", n: 2, allowed: true, remaining: 0, reset: 450 * ms},
		{name: "cost above the burst", op: "check", n: 6, remaining: 0, retry: 450 * ms, reset: 450 * ms},
		{name: "full again", advance: s1, op: "check", n: 1, allowed: true, remaining: 4, reset: 100 * ms},
		{name: "return 3 of 1 taken: capped at the burst", op: "return", n: 3, lease: 0},
		{name: "whole burst", op: "check", n: 5, allowed: true, remaining: 0, reset: 500 * ms},
	})
}

// TestQuotaSteps walks each calendar across its boundary: a window starts at
// the boundary, still holds a microsecond before the next, and the next starts
// on it.
func TestQuotaSteps(t *testing.T) {
	st, _ := newStore(t, redisstore.Options{})
	day := timeline()
	monday := day.AddDate(0, 0, (8-int(day.Weekday()))%7) // Sunday is 0
	month := time.Date(day.Year(), day.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	year := time.Date(day.Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		cal   gale.Calendar
		start time.Time
		end   func(time.Time) time.Time // the next boundary after one
	}{
		{gale.Day, day, func(t time.Time) time.Time { return t.AddDate(0, 0, 1) }},
		{gale.Week, monday, func(t time.Time) time.Time { return t.AddDate(0, 0, 7) }},
		{gale.Month, month, func(t time.Time) time.Time { return t.AddDate(0, 1, 0) }},
		{gale.Year, year, func(t time.Time) time.Time { return t.AddDate(1, 0, 0) }},
	} {
		t.Run(tc.cal.String(), func(t *testing.T) {
			end, next := tc.end(tc.start), tc.end(tc.end(tc.start))
			span, nextSpan := end.Sub(tc.start), next.Sub(end)
			walk(t, st, gale.Rule{Algorithm: gale.Quota, Limit: 3, Calendar: tc.cal}, tc.start, []step{
				{name: "take 2 at the boundary", op: "check", n: 2, allowed: true, remaining: 1, reset: span},
				{name: "lease the last", op: "lease", n: 1, max: 5, allowed: true, granted: 1, remaining: 0, reset: span},
				{name: "1µs before the end", advance: span - us, op: "check", n: 1, remaining: 0, retry: us, reset: us},
				{name: "return the lease", op: "return", n: 1, lease: 0},
				{name: "taken again", op: "check", n: 1, allowed: true, remaining: 0, reset: us},
				{name: "next window", advance: us, op: "check", n: 3, allowed: true, remaining: 0, reset: nextSpan},
				{name: "return into the ended window", op: "return", n: 1, lease: 0},
				{name: "changed nothing", op: "check", n: 1, remaining: 0, retry: nextSpan, reset: nextSpan},
			})
		})
	}
	t.Run("week from a Thursday noon", func(t *testing.T) {
		thursday := monday.AddDate(0, 0, 3).Add(12 * time.Hour)
		walk(t, st, gale.Rule{Algorithm: gale.Quota, Limit: 1, Calendar: gale.Week}, thursday, []step{
			{name: "take", op: "check", n: 1, allowed: true, remaining: 0, reset: 3*24*time.Hour + 12*time.Hour},
		})
	})
}
