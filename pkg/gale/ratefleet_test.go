package gale_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// rateRules are issue 29's shape: GCRA and token bucket, 100/s, burst 20.
var rateRules = []gale.Rule{
	{Algorithm: gale.GCRA, Limit: 100, Period: time.Second, Burst: 20},
	{Algorithm: gale.TokenBucket, Limit: 100, Period: time.Second, Burst: 20},
}

// conforms replays admissions (instants, in order) through one bucket of
// rule r, the pure strategy: it returns the first admission the bucket
// would have refused, or -1 when a single bucket admits them all — that
// is, when every interval [a, b] saw at most Capacity + rate·(b − a).
func conforms(r gale.Rule, admitted []time.Time) int {
	var s gale.State
	for i, at := range admitted {
		var o gale.Outcome
		s, o = r.Take(s, at.UnixMicro(), 1, 1)
		if o.Granted != 1 {
			return i
		}
	}
	return -1
}

// TestLeasedRateFleetAfterIdle (issue 29, item 2): the README's shape —
// leased GCRA (and token bucket) 100/s, burst 20, batch 50, over four
// limiters on one store (memory and real Redis). Each serves one request,
// all go idle, then a 100 ms burst from all four. Leased credits of a rule
// without windows used to carry whole (uncoupled silently): 105 admitted
// where one bucket allows 20 + 100·0.1 = 30. Window-coupled they decay as
// the store's bucket drains, and the burst admits at most 30.
func TestLeasedRateFleetAfterIdle(t *testing.T) {
	for _, backend := range []struct {
		name  string
		store func(t *testing.T) gale.Store
	}{
		{"memory", func(*testing.T) gale.Store { return memstore.New() }},
		{"redis", func(t *testing.T) gale.Store { s, _ := newRedisStore(t); return s }},
	} {
		for _, r := range rateRules {
			t.Run(fmt.Sprintf("%s/%s", backend.name, r.Algorithm), func(t *testing.T) {
				f := newFleet(t, backend.store(t), 4, r, gale.LeaseConfig{Batch: 50})
				t0 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
				var admitted []time.Time
				for n := range f.nodes {
					now := t0.Add(time.Duration(n) * time.Millisecond)
					if f.check(n, now) {
						admitted = append(admitted, now)
					}
				}
				burst := t0.Add(2 * time.Second) // an idle pause: the store's bucket is full again
				in := 0
				for i := range 400 {
					now := burst.Add(time.Duration(i) * 250 * time.Microsecond) // 100 ms
					if f.check(i%4, now) {
						admitted = append(admitted, now)
						in++
					}
				}
				if in > 30 {
					t.Fatalf("the 100 ms burst after idle admitted %d; one bucket admits at most 20 + 100·0.1 = 30", in)
				}
				if i := conforms(r, admitted); i >= 0 {
					t.Fatalf("admission %d at %v is one a single bucket refuses", i, admitted[i].Sub(t0))
				}
				if in < 29 {
					t.Errorf("the burst admitted %d, want about 30 (the bound reached, less a unit of rounding)", in)
				}
				t.Logf("%d admitted in the 100 ms burst", in)
			})
		}
	}
}

// TestLeasedRateFleetConforms: four leased, window-coupled limiters on one
// store, random checks on random nodes at random instants over many
// seconds: everything the fleet admits, replayed through one bucket of the
// rule, is admitted by it — the fleet never exceeds Capacity + rate·t over
// any interval, for any number of nodes.
func TestLeasedRateFleetConforms(t *testing.T) {
	for _, r := range append(rateRules,
		gale.Rule{Algorithm: gale.GCRA, Limit: 7, Period: time.Second, Burst: 3},
		gale.Rule{Algorithm: gale.TokenBucket, Limit: 30, Period: time.Minute, Burst: 9}) {
		for _, batch := range []int64{1, 4, 50} {
			t.Run(fmt.Sprintf("%s/%d-per-%v/batch-%d", r.Algorithm, r.Limit, r.Period, batch), func(t *testing.T) {
				f := newFleet(t, memstore.New(), 4, r, gale.LeaseConfig{Batch: batch})
				rng := rand.New(rand.NewPCG(uint64(r.Limit), uint64(batch)))
				now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
				per := r.Period / time.Duration(r.Limit)
				var admitted []time.Time
				for range 4000 {
					now = now.Add(time.Duration(rng.Int64N(int64(per) * 2 / 3))) // three times the rate
					if rng.IntN(50) == 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(r.Period)))) // an idle pause
					}
					if f.check(rng.IntN(4), now) {
						admitted = append(admitted, now)
					}
				}
				if i := conforms(r, admitted); i >= 0 {
					t.Fatalf("admission %d of %d is one a single bucket refuses", i, len(admitted))
				}
				t.Logf("%d admitted, all conforming", len(admitted))
			})
		}
	}
}
