package storetest

import (
	"context"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

func (h *harness) charge(r gale.Rule, n int64) gale.Decision {
	h.t.Helper()
	d, err := h.s.Charge(context.Background(), h.key, r, n, h.now)
	if err != nil {
		h.t.Fatalf("Charge(%d) at %v: %v", n, h.now, err)
	}
	return d
}

// expectOverrun asserts a charge's overrun (0 for one that fit) besides
// what expect asserts.
func (h *harness) expectOverrun(step string, d gale.Decision, overrun int64, w want) {
	h.t.Helper()
	if d.Overrun != overrun {
		h.t.Fatalf("%s: overrun %d, want %d (%+v)", step, d.Overrun, overrun, d)
	}
	h.expect(step, d, w)
}

// chargeCases hold the store to Rule.Charge: a charge is counted in full,
// past the limit too, and answered as envoyproxy/ratelimit answers a
// descriptor's hits_addend (OVER_LIMIT once the count after it is above
// the limit); 0 counts nothing and is allowed at the limit exactly.
var chargeCases = []contractCase{
	{"ChargeFixedWindow", func(h *harness) {
		r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Hour}
		h.expectOverrun("check-only, fresh", h.charge(r, 0), 0, want{allowed: true, remaining: 10})
		h.expectOverrun("check-only counted nothing", h.charge(r, 0), 0, want{allowed: true, remaining: 10})
		h.expectOverrun("charge 4", h.charge(r, 4), 0, want{allowed: true, remaining: 6, resetIn: time.Hour})
		h.advance(10 * time.Minute)
		h.expectOverrun("charge 6 reaches the limit", h.charge(r, 6), 0, want{allowed: true, remaining: 0})
		h.expectOverrun("check-only at the limit is OK", h.charge(r, 0), 0, want{allowed: true, remaining: 0})
		h.expectOverrun("charge 5 overruns, counted", h.charge(r, 5), 5, want{remaining: 0, retry: 50 * time.Minute})
		h.expectOverrun("check-only past the limit", h.charge(r, 0), 0, want{remaining: 0, retry: 50 * time.Minute})
		h.expect("a check past the limit", h.check(r, 1), want{remaining: 0, retry: 50 * time.Minute})
		if g := h.lease(r, 1, 5); g.Granted != 0 {
			h.t.Fatalf("a lease on a window in debt granted %d", g.Granted)
		}
		h.expectOverrun("charge 3 more", h.charge(r, 3), 3, want{remaining: 0, retry: 50 * time.Minute})
		h.giveBack(r, 4, h.now.Add(50*time.Minute))
		h.expectOverrun("4 given back: still 4 past", h.charge(r, 0), 0, want{remaining: 0, retry: 50 * time.Minute})
		h.advance(50 * time.Minute)
		h.expectOverrun("next window: the debt stayed in its own", h.charge(r, 0), 0, want{allowed: true, remaining: 10})
		h.expectOverrun("charge 8", h.charge(r, 8), 0, want{allowed: true, remaining: 2})
		h.expectOverrun("charge 5 of 2 left", h.charge(r, 5), 3, want{remaining: 0, retry: time.Hour})
	}},
	{"ChargeFitsAsTakeDoes", func(h *harness) {
		r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 3, Period: time.Minute}
		h.expect("charge 2", h.charge(r, 2), want{allowed: true, remaining: 1, resetIn: time.Minute})
		h.expect("then a check of 2", h.check(r, 2), want{remaining: 1, retry: time.Minute})
		h.expect("and of 1", h.check(r, 1), want{allowed: true, remaining: 0})
	}},
	{"ChargeSlidingWindow", func(h *harness) {
		r := gale.Rule{Algorithm: gale.SlidingWindow, Limit: 10, Period: time.Minute}
		h.expectOverrun("charge 15", h.charge(r, 15), 5, want{remaining: 0, retry: 80 * time.Second, resetIn: 2 * time.Minute})
		// In the next window the 15 weigh 15·(60−t)/60: at most 10 from 20 s in.
		h.advance(80*time.Second - time.Microsecond)
		h.expectOverrun("a µs early", h.charge(r, 0), 0, want{remaining: 0, retry: time.Microsecond})
		h.advance(time.Microsecond)
		h.expectOverrun("check-only at the limit", h.charge(r, 0), 0, want{allowed: true, remaining: 0})
		h.expect("a check still waits", h.check(r, 1), want{remaining: 0, retry: 4 * time.Second})
	}},
	{"ChargeGCRA", func(h *harness) {
		r := gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second, Burst: 10}
		h.expectOverrun("charge 15", h.charge(r, 15), 5, want{remaining: 0, retry: 500 * time.Millisecond, resetIn: 1500 * time.Millisecond})
		h.advance(500 * time.Millisecond)
		h.expectOverrun("drained to the burst", h.charge(r, 0), 0, want{allowed: true, remaining: 0})
		h.advance(100 * time.Millisecond)
		h.expect("one unit fits", h.check(r, 1), want{allowed: true, remaining: 0})
	}},
	{"ChargeTokenBucket", func(h *harness) {
		r := gale.Rule{Algorithm: gale.TokenBucket, Limit: 10, Period: time.Second, Burst: 10}
		h.expectOverrun("charge 15", h.charge(r, 15), 5, want{remaining: 0, retry: 500 * time.Millisecond, resetIn: 1500 * time.Millisecond})
		h.advance(500 * time.Millisecond)
		h.expectOverrun("refilled to empty", h.charge(r, 0), 0, want{allowed: true, remaining: 0})
		h.advance(100 * time.Millisecond)
		h.expect("one token", h.check(r, 1), want{allowed: true, remaining: 0})
	}},
	{"ChargeQuotaMonth", func(h *harness) {
		r := gale.Rule{Algorithm: gale.Quota, Limit: 1000, Calendar: gale.Month}
		y, m, _ := h.now.Date()
		start := time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
		end := start.AddDate(0, 1, 0)
		h.now = start.Add(3 * 24 * time.Hour)
		h.expectOverrun("a month's tokens at once", h.charge(r, 1200), 200, want{remaining: 0, retry: end.Sub(h.now), resetIn: end.Sub(h.now)})
		h.advance(20 * 24 * time.Hour)
		h.expectOverrun("still spent", h.charge(r, 0), 0, want{remaining: 0, retry: end.Sub(h.now)})
		h.now = end
		h.expectOverrun("next month", h.charge(r, 0), 0, want{allowed: true, remaining: 1000})
	}},
}
