package fair

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestMoreTenantsThanTheLimitStillAdmit: when more tenants ask than the
// limit has units, every weighted share is under one unit, and a rule
// that rounded each share down admitted nothing at all (docs/policy.md's
// example, 40 a second: 41 tenants asking 4 times a second got 0 in
// every second). Work conservation (PROOFS §5) wants Σ admitted =
// min(Σ demand, L) in each window, and each tenant at most its share
// rounded up, or one call when it has had nothing yet.
func TestMoreTenantsThanTheLimitStillAdmit(t *testing.T) {
	const limit = 40
	for _, tc := range []struct {
		tenants, calls int // per second each
		cost           int64
	}{
		{39, 4, 1}, {41, 4, 1}, {45, 1, 1}, {60, 1, 1}, {1000, 1, 1},
		{41, 4, 3}, // a cost above every share: one call each, while the cap has room
	} {
		t.Run(fmt.Sprintf("%d tenants × %d calls of %d", tc.tenants, tc.calls, tc.cost), func(t *testing.T) {
			e := mustNew(t, Config{Limit: limit, Window: time.Second, MaxTenants: 1000})
			rng := rand.New(rand.NewPCG(uint64(tc.tenants), uint64(tc.calls)))
			for sec := range 4 {
				var order []int
				for range tc.calls {
					order = append(order, rng.Perm(tc.tenants)...)
				}
				admitted := map[int]int64{}
				var sum, demand int64
				for i, tn := range order {
					at := t0.Add(time.Duration(sec)*time.Second + time.Duration(i)*time.Second/time.Duration(len(order)+1))
					demand += tc.cost
					if d := e.Decide(fmt.Sprintf("t%d", tn), tc.cost, at); d.Allowed {
						admitted[tn] += tc.cost
						sum += tc.cost
					}
				}
				// The least the window must admit: every unit while the
				// demand fits, else all but what no whole call fits in.
				least := min(demand, limit)
				if demand > limit {
					least = limit - tc.cost + 1
				}
				if sum > limit || sum < least {
					t.Errorf("second %d: %d admitted of %d asked, want %d..%d (min(Σ demand, L) less a call's rounding)", sec, sum, demand, least, limit)
				}
				share := float64(limit) / float64(tc.tenants)
				for tn, a := range admitted {
					if ceil := int64(share + 0.999999); a > max(ceil, tc.cost) {
						t.Errorf("second %d: tenant %d admitted %d, past its share %.2f rounded up (or one call of %d)", sec, tn, a, share, tc.cost)
					}
				}
				if sh := e.Shares(); sec > 0 && len(sh) > 0 {
					zero := 0
					for _, v := range sh {
						if v == 0 {
							zero++
						}
					}
					if zero > 0 {
						t.Errorf("second %d: %d of %d tenants' shares read 0 while they ask (throttlekit_fair_share)", sec, zero, len(sh))
					}
				}
			}
		})
	}
}
