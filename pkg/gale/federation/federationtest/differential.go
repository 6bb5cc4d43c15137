package federationtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// DifferentialCoordinator drives want (the reference, usually the
// MemoryCoordinator) and got with one random schedule of leases, reconciles
// (retries among them) and clock steps over a few keys, several regions
// and the windowed rules, and fails at the first step where their answers
// differ. Both must read the callers' clock.
func DifferentialCoordinator(t *testing.T, seed uint64, steps int, want, got federation.Coordinator) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rules := []gale.Rule{
		{Algorithm: gale.FixedWindow, Limit: 12, Period: time.Second},
		{Algorithm: gale.SlidingWindow, Limit: 9, Period: 2 * time.Second},
		{Algorithm: gale.Quota, Limit: 20, Calendar: gale.Day},
	}
	prefix := fmt.Sprintf("diff/%d/%d/", seed, time.Now().UnixNano())
	now := storetest.Timeline()
	ends := map[string][]time.Time{} // window ends granted, per key, for reconciles to name
	ctx := context.Background()
	for i := range steps {
		ri := rng.IntN(len(rules))
		r := rules[ri]
		key := fmt.Sprintf("%s%d/%d", prefix, ri, rng.IntN(2))
		switch op := rng.IntN(10); {
		case op < 2:
			now = now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond)
		case op < 7:
			min := 1 + rng.Int64N(4)
			max := min + rng.Int64N(5)
			a, errA := want.Lease(ctx, key, r, min, max, now)
			b, errB := got.Lease(ctx, key, r, min, max, now)
			if errA != nil || errB != nil {
				t.Fatalf("seed %d step %d: Lease(%s, %d..%d): errors %v / %v", seed, i, key, min, max, errA, errB)
			}
			if !sameGrant(a, b) {
				t.Fatalf("seed %d step %d: Lease(%s, %s, %d..%d) at %v:\nwant %+v\ngot  %+v", seed, i, key, r, min, max, now, a, b)
			}
			if a.Granted > 0 {
				ends[key] = append(ends[key], a.WindowEnd)
			}
		default:
			if len(ends[key]) == 0 {
				continue
			}
			rec := federation.Reconcile{
				Leftover:  rng.Int64N(6),
				WindowEnd: ends[key][rng.IntN(len(ends[key]))],
				Token:     fmt.Sprintf("region-%d", rng.IntN(3)),
				Now:       now,
			}
			a, errA := want.Reconcile(ctx, key, r, rec)
			b, errB := got.Reconcile(ctx, key, r, rec)
			if errA != nil || errB != nil || a != b {
				t.Fatalf("seed %d step %d: Reconcile(%s, %+v): want %v (%v), got %v (%v)", seed, i, key, rec, a, errA, b, errB)
			}
		}
	}
}

func sameGrant(a, b gale.Grant) bool {
	da, db := a.Decision, b.Decision
	return a.Granted == b.Granted && a.WindowEnd.Equal(b.WindowEnd) && a.Now.Equal(b.Now) &&
		da.Allowed == db.Allowed && da.Remaining == db.Remaining && da.ResetAt.Equal(db.ResetAt) && da.RetryAfter == db.RetryAfter
}
