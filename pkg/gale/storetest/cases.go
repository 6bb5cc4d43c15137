package storetest

import (
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

type contractCase struct {
	name string
	run  func(h *harness)
}

var contractCases = []contractCase{
	{"FixedWindow", func(h *harness) {
		r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 3, Period: time.Minute}
		h.expect("1st", h.check(r, 1), want{allowed: true, remaining: 2, resetIn: time.Minute})
		h.advance(10 * time.Second)
		h.expect("2nd", h.check(r, 1), want{allowed: true, remaining: 1, resetIn: 50 * time.Second})
		h.expect("cost 2 > 1 remaining is denied whole", h.check(r, 2), want{remaining: 1, retry: 50 * time.Second})
		h.expect("the denial consumed nothing", h.check(r, 1), want{allowed: true, remaining: 0})
		h.expect("exhausted", h.check(r, 1), want{remaining: 0, retry: 50 * time.Second, resetIn: 50 * time.Second})
		h.advance(50*time.Second - time.Microsecond)
		h.expect("1µs before the boundary", h.check(r, 1), want{remaining: 0, retry: time.Microsecond})
		h.advance(time.Microsecond)
		h.expect("new window", h.check(r, 3), want{allowed: true, remaining: 0, resetIn: time.Minute})
	}},
	{"CostAboveCapacityNeverAdmitted", func(h *harness) {
		r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 3, Period: time.Minute}
		h.expect("cost 4 of 3", h.check(r, 4), want{remaining: 3, retry: time.Minute})
		h.expect("nothing consumed", h.check(r, 3), want{allowed: true, remaining: 0})
	}},
	{"SlidingWindow", func(h *harness) {
		r := gale.Rule{Algorithm: gale.SlidingWindow, Limit: 10, Period: time.Minute}
		// The 10 weigh in until the next window has ended too.
		h.expect("take 10", h.check(r, 10), want{allowed: true, remaining: 0, resetIn: 2 * time.Minute})
		h.advance(time.Minute)
		// previous window weighs 10·60/60 = 10: nothing left; 5 fit once half
		// of the previous window has slid out; all 10 at its end.
		h.expect("boundary", h.check(r, 5), want{remaining: 0, retry: 30 * time.Second, resetIn: time.Minute})
		h.advance(30 * time.Second)
		h.expect("half slid out", h.check(r, 5), want{allowed: true, remaining: 0})
		h.advance(15 * time.Second)
		h.expect("a quarter left", h.check(r, 2), want{allowed: true, remaining: 0})
		// 10·12/60 + 7 = 9 at 48 s: one unit fits 3 s from now.
		h.expect("full", h.check(r, 1), want{remaining: 0, retry: 3 * time.Second})
		// next window: previous = 7, current = 0.
		h.advance(15 * time.Second)
		h.expect("next window", h.check(r, 3), want{allowed: true, remaining: 0})
	}},
	{"GCRA", func(h *harness) {
		r := gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second, Burst: 5}
		h.expect("burst", h.check(r, 5), want{allowed: true, remaining: 0, resetIn: 500 * time.Millisecond})
		h.expect("over", h.check(r, 1), want{remaining: 0, retry: 100 * time.Millisecond})
		h.expect("cost 3", h.check(r, 3), want{remaining: 0, retry: 300 * time.Millisecond})
		h.advance(100 * time.Millisecond)
		h.expect("one emission interval later", h.check(r, 1), want{allowed: true, remaining: 0})
		h.advance(time.Second)
		h.expect("idle refills to burst", h.check(r, 1), want{allowed: true, remaining: 4})
		h.expect("cost above burst", h.check(r, 6), want{remaining: 4, retry: 100 * time.Millisecond})
	}},
	{"TokenBucket", func(h *harness) {
		r := gale.Rule{Algorithm: gale.TokenBucket, Limit: 10, Period: time.Second, Burst: 5}
		h.expect("burst", h.check(r, 5), want{allowed: true, remaining: 0, resetIn: 500 * time.Millisecond})
		h.expect("over", h.check(r, 1), want{remaining: 0, retry: 100 * time.Millisecond})
		h.advance(250 * time.Millisecond)
		h.expect("2.5 tokens: cost 3 waits 50ms", h.check(r, 3), want{remaining: 2, retry: 50 * time.Millisecond})
		h.expect("cost 2", h.check(r, 2), want{allowed: true, remaining: 0})
		h.advance(time.Hour)
		h.expect("full again", h.check(r, 1), want{allowed: true, remaining: 4})
	}},
	{"QuotaMonth", func(h *harness) {
		r := gale.Rule{Algorithm: gale.Quota, Limit: 2, Calendar: gale.Month}
		y, m, _ := h.now.Date()
		start := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		h.now = start.Add(10 * 24 * time.Hour)
		end := start.AddDate(0, 1, 0)
		h.expect("1", h.check(r, 2), want{allowed: true, remaining: 0, resetIn: end.Sub(h.now)})
		h.expect("over", h.check(r, 1), want{remaining: 0, retry: end.Sub(h.now)})
		h.now = end
		h.expect("next month", h.check(r, 1), want{allowed: true, remaining: 1})
	}},
	{"QuotaWeekStartsMonday", func(h *harness) {
		r := gale.Rule{Algorithm: gale.Quota, Limit: 1, Calendar: gale.Week}
		for h.now.Weekday() != time.Wednesday {
			h.advance(24 * time.Hour)
		}
		h.expect("wednesday", h.check(r, 1), want{allowed: true, remaining: 0, resetIn: 5 * 24 * time.Hour})
		h.advance(5*24*time.Hour - time.Microsecond)
		h.expect("sunday night", h.check(r, 1), want{remaining: 0, retry: time.Microsecond})
		h.advance(time.Microsecond)
		h.expect("monday", h.check(r, 1), want{allowed: true, remaining: 0})
	}},
	{"LeaseAndReturn", func(h *harness) {
		r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
		end := h.now.Add(time.Minute)
		for i, w := range []int64{4, 4, 2} {
			g := h.lease(r, 1, 4)
			if g.Granted != w || !g.WindowEnd.Equal(end) || !g.Now.Equal(h.now) {
				h.t.Fatalf("lease %d: granted %d window end %v now %v, want %d %v %v", i, g.Granted, g.WindowEnd, g.Now, w, end, h.now)
			}
		}
		if g := h.lease(r, 1, 4); g.Granted != 0 || g.Decision.Allowed || g.Decision.RetryAfter != time.Minute {
			h.t.Fatalf("lease on an empty window: %+v", g)
		}
		h.giveBack(r, 3, end)
		if g := h.lease(r, 4, 8); g.Granted != 0 {
			h.t.Fatalf("lease with min 4 of 3 returned: granted %d", g.Granted)
		}
		if g := h.lease(r, 2, 8); g.Granted != 3 || g.Decision.Remaining != 0 {
			h.t.Fatalf("lease after return: %+v", g)
		}
		h.giveBack(r, 2, end.Add(-time.Minute)) // a window that is not this one
		h.expect("stale return ignored", h.check(r, 1), want{remaining: 0, retry: time.Minute})
		h.advance(time.Minute)
		h.giveBack(r, 5, end) // the window has ended: dropped
		h.expect("next window is fresh", h.check(r, 1), want{allowed: true, remaining: 9})
	}},
	{"ReturnToBuckets", func(h *harness) {
		for _, a := range []gale.Algorithm{gale.GCRA, gale.TokenBucket} {
			h.key += a.String()
			r := gale.Rule{Algorithm: a, Limit: 10, Period: time.Second, Burst: 5}
			g := h.lease(r, 1, 5)
			if g.Granted != 5 || !g.WindowEnd.IsZero() {
				h.t.Fatalf("%v lease: %+v", a, g)
			}
			h.giveBack(r, 2, time.Time{})
			h.expect(a.String()+" returned 2", h.check(r, 2), want{allowed: true, remaining: 0})
			h.giveBack(r, 50, time.Time{})
			h.expect(a.String()+" return caps at burst", h.check(r, 5), want{allowed: true, remaining: 0})
		}
	}},
}
