package gale_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// FuzzTake feeds arbitrary rules, states and instants to the strategies: no
// input may panic, and every valid one keeps the contract (a grant within
// [min, max] or nothing; a denial unchanged and with a positive retry-after;
// remaining within [0, capacity]).
func FuzzTake(f *testing.F) {
	f.Add(uint8(1), int64(10), int64(1_000_000), int64(0), uint8(0), int64(0), int64(0), int64(0), int64(0), 0.0, int64(0), int64(1_800_000_000_000_000), int64(1), int64(3))
	f.Add(uint8(3), int64(7), int64(333_333), int64(2), uint8(0), int64(0), int64(0), int64(0), int64(1_800_000_000_100_000), 0.0, int64(0), int64(1_800_000_000_000_000), int64(2), int64(2))
	f.Add(uint8(4), int64(7), int64(333_333), int64(5), uint8(0), int64(0), int64(0), int64(0), int64(0), 1.5, int64(1_799_999_999_000_000), int64(1_800_000_000_000_000), int64(2), int64(9))
	f.Add(uint8(5), int64(3), int64(0), int64(0), uint8(3), int64(1_800_000_000_000_000), int64(2), int64(0), int64(0), 0.0, int64(0), int64(1_800_000_000_000_000), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, algo uint8, limit, periodUS, burst int64, cal uint8, window, used, prev, tat int64, tokens float64, refilled, now, min, max int64) {
		r := gale.Rule{Algorithm: gale.Algorithm(algo), Limit: limit, Period: time.Duration(periodUS) * time.Microsecond, Burst: burst, Calendar: gale.Calendar(cal)}
		if periodUS < 0 || periodUS > int64(gale.MaxPeriod/time.Microsecond) {
			return
		}
		if err := gale.CheckArgs(r, min, max); err != nil {
			return
		}
		// Instants a real clock can produce: 1970 to 2200.
		if now <= 0 || now > 7_258_118_400_000_000 {
			return
		}
		s := gale.State{Window: window, Used: used, Prev: prev, TAT: tat, Tokens: tokens, Refilled: refilled}
		next, o := r.Take(s, now, min, max)
		if o.Granted == 0 {
			if next != s && !(tokens != tokens) { // NaN never equals itself
				t.Fatalf("denial changed the state")
			}
			if o.RetryAfter <= 0 {
				t.Fatalf("denial with retry after %d", o.RetryAfter)
			}
		} else if o.Granted < min || o.Granted > max {
			t.Fatalf("granted %d outside [%d, %d]", o.Granted, min, max)
		}
		if o.Remaining < 0 || o.Remaining > r.Capacity() {
			t.Fatalf("remaining %d outside [0, %d]", o.Remaining, r.Capacity())
		}
		r.Give(next, now, o.Granted, o.WindowEnd)
	})
}
