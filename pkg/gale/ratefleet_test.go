package gale_test

import (
	"fmt"
	"math/big"
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

// conforms checks admissions (instants, in order) against the bound one
// bucket of rule r holds, exactly: every interval [a, b] sees at most
// Capacity + Limit·(b − a)/Period of them. It returns the first admission
// that takes an interval ending at it past the bound, or -1 when none
// does.
//
// With admissions k = 0, 1, … at t_k, the interval [t_i, t_j] holds
// j − i + 1 of them, so the bound is (j − i + 1)·Period − Limit·(t_j − t_i)
// ≤ Capacity·Period: with f(k) = k·Period − Limit·t_k, f(j) − f(i) + Period
// ≤ Capacity·Period for every i ≤ j, and it suffices to keep the least f
// seen. Integers throughout (ns since the first admission): no rounding.
// (It used to replay the admissions through the pure GCRA, whose unit
// increments round up, to the µs: a bucket of 3/s and burst 10 takes 9 at
// once there, and the replay flagged fleets that had not exceeded the
// bound.)
func conforms(r gale.Rule, admitted []time.Time) int {
	if len(admitted) == 0 {
		return -1
	}
	period, limit, capacity := big.NewInt(int64(r.Period)), big.NewInt(r.Limit), big.NewInt(r.Capacity())
	bound := new(big.Int).Mul(capacity, period)
	f := func(k int) *big.Int {
		x := new(big.Int).Mul(big.NewInt(int64(k)), period)
		return x.Sub(x, new(big.Int).Mul(limit, big.NewInt(int64(admitted[k].Sub(admitted[0])))))
	}
	least := f(0)
	for j := range admitted {
		fj := f(j)
		if fj.Cmp(least) < 0 {
			least = fj
		}
		held := new(big.Int).Sub(fj, least)
		if held.Add(held, period).Cmp(bound) > 0 {
			return j
		}
	}
	return -1
}

// TestConformsIsExact: the oracle passes a bucket's exact limit and fails
// one admission past it, where rounding to the µs or per unit would not
// tell: a burst of Capacity then one every Period/Limit (a third of a
// second: no whole number of µs), with and without one more.
func TestConformsIsExact(t *testing.T) {
	for _, r := range []gale.Rule{
		{Algorithm: gale.GCRA, Limit: 3, Period: time.Second, Burst: 10},
		{Algorithm: gale.TokenBucket, Limit: 7, Period: time.Minute, Burst: 4},
		{Algorithm: gale.GCRA, Limit: 100, Period: time.Second, Burst: 20},
	} {
		t0 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
		var at []time.Time
		for range r.Capacity() {
			at = append(at, t0)
		}
		for k := int64(1); k <= 1000; k++ {
			// The k-th unit of refill is whole at k·Period/Limit, rounded
			// up to the ns.
			at = append(at, t0.Add(time.Duration((k*int64(r.Period)+r.Limit-1)/r.Limit)))
		}
		if i := conforms(r, at); i >= 0 {
			t.Errorf("%v: a burst of %d then one a unit of refill: admission %d flagged, want none", r, r.Capacity(), i)
		}
		early := append([]time.Time(nil), at...)
		early[500] = early[500].Add(-time.Nanosecond) // one ns before its unit is whole
		if i := conforms(r, early); i != 500 {
			t.Errorf("%v: admission 500 a ns early: flagged %d, want 500", r, i)
		}
		extra := append(append([]time.Time(nil), at[:600]...), at[599])
		if i := conforms(r, extra); i != 600 {
			t.Errorf("%v: one more at admission 599's instant: flagged %d, want 600", r, i)
		}
	}
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
		gale.Rule{Algorithm: gale.TokenBucket, Limit: 30, Period: time.Minute, Burst: 9},
		gale.Rule{Algorithm: gale.GCRA, Limit: 3, Period: time.Second, Burst: 10}) {
		for _, batch := range []int64{1, 2, 4, 50} {
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
