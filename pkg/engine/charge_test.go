package engine_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const chargeEnginePolicy = `
domain: ai
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: route
    descriptors:
      - key: tenant
        fairness: {tenant_key: tenant}
        rate_limit: {unit: hour, requests_per_unit: 10}
`

// charged is req with every descriptor's own hits_addend set to n (a
// charge; 0 checks without counting).
func charged(n uint64, domain string, descs ...string) *engine.Request {
	r := req(domain, descs...)
	for i := range r.Descriptors {
		r.Descriptors[i].HitsAddend = &n
	}
	return r
}

// TestChargesInTheEngine: the rules beside a plain limit — shadow, a
// blocked limit, a fair one, negative hits — and the counters metrics
// read.
func TestChargesInTheEngine(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"ai.yaml": chargeEnginePolicy})
	now := storetest.Timeline()
	step := func(name string, r *engine.Request, wantCode string, wantRemaining uint32) {
		t.Helper()
		resp := decide(t, e, r, now)
		if got := codes(resp); got != wantCode || resp.Statuses[0].Remaining != wantRemaining {
			t.Fatalf("%s: %s remaining %d, want %s remaining %d", name, got, resp.Statuses[0].Remaining, wantCode, wantRemaining)
		}
	}
	step("check-only", charged(0, "ai", "user=a"), "OK OK", 10)
	step("charge 12 of 10", charged(12, "ai", "user=a"), "OVER_LIMIT OVER_LIMIT", 0)
	step("check-only past the limit", charged(0, "ai", "user=a"), "OVER_LIMIT OVER_LIMIT", 0)

	// A negative hit of 0 gives nothing back; of 5, 5 of the 12.
	neg := charged(0, "ai", "user=a")
	neg.Descriptors[0].Negative = true
	step("a negative hit of 0", neg, "OK OK", 0)
	step("still 2 past", charged(0, "ai", "user=a"), "OVER_LIMIT OVER_LIMIT", 0)
	five := uint64(5)
	neg.Descriptors[0].HitsAddend = &five
	step("a negative hit of 5", neg, "OK OK", 0)
	step("7 counted: 3 left", charged(0, "ai", "user=a"), "OK OK", 3)

	// Shadow: an overrun is counted, and answered OK.
	step("shadow charge 12", charged(12, "ai", "shadow=s"), "OK OK", 0)
	step("shadow check-only past the limit", charged(0, "ai", "shadow=s"), "OK OK", 0)

	// A blocked limit (requests_per_unit 0) refuses every call, check-only
	// ones too, and counts nothing.
	step("blocked check-only", charged(0, "ai", "blocked=b"), "OVER_LIMIT OVER_LIMIT", 0)

	// A fair rule counts a charge in full, even past the limit, as every
	// rule does (it used to take it whole or not at all, and dropped what
	// did not fit); a check-only charge is a check of one unit.
	step("fair check-only counts 1", charged(0, "ai", "route=r,tenant=t"), "OK OK", 9)
	step("fair charge 3 fits", charged(3, "ai", "route=r,tenant=t"), "OK OK", 6)
	step("fair charge 12 is counted past the limit", charged(12, "ai", "route=r,tenant=t"), "OVER_LIMIT OVER_LIMIT", 0)
	step("fair check-only past the limit", charged(0, "ai", "route=r,tenant=u"), "OVER_LIMIT OVER_LIMIT", 0)

	var got engine.Charges
	for _, s := range e.Snapshot() {
		if s.Ref.Name == "user" {
			got = s.Charges
		}
	}
	if want := (engine.Charges{CheckOnly: 4, Charged: 1, OverrunUnits: 2}); got != want {
		t.Fatalf("user's charge counters %+v, want %+v", got, want)
	}
	now = now.Add(time.Hour)
	step("the next window", charged(0, "ai", "user=a"), "OK OK", 10)
	step("the fair rule's next window", charged(0, "ai", "route=r,tenant=t"), "OK OK", 9)
}

// TestMonthlyTokenBudget loads config/budgets (a token budget per user per
// UTC calendar month, algorithm: quota) and charges it across the end of
// January and of February, on the memory store and on Redis: the budget
// resets on the 1st at 00:00 UTC whatever the month's length, and an
// overrun in January leaves February whole.
func TestMonthlyTokenBudget(t *testing.T) {
	set, err := policy.Load("../../config/budgets")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) gale.Store
	}{
		{"memory", func(*testing.T) gale.Store { return memstore.New() }},
		{"redis", func(t *testing.T) gale.Store {
			s, err := redisstore.New(testenv.StartRedis(t).Client(), redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.New(engine.Options{Store: tc.store(t), StoreTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(bg) })
			if err := e.Load(bg, set); err != nil {
				t.Fatal(err)
			}
			// Late in 2027, ahead of Redis's own clock.
			now := time.Date(2027, 1, 31, 23, 0, 0, 0, time.UTC)
			step := func(name string, n uint64, wantCode string, wantRemaining uint32, wantReset time.Duration) {
				t.Helper()
				resp := decide(t, e, charged(n, "ai", "user_id=alice"), now)
				st := resp.Statuses[0]
				if got := codes(resp); got != wantCode || st.Remaining != wantRemaining || st.UntilReset != wantReset {
					t.Fatalf("%s: %s remaining %d reset in %v, want %s remaining %d reset in %v", name, got, st.Remaining, st.UntilReset, wantCode, wantRemaining, wantReset)
				}
			}
			step("check-only on January 31st", 0, "OK OK", 1_000_000, time.Hour)
			step("a month's tokens less 1,000", 999_000, "OK OK", 1_000, time.Hour)
			step("5,000 more overrun", 5_000, "OVER_LIMIT OVER_LIMIT", 0, time.Hour)
			step("check-only after the overrun", 0, "OVER_LIMIT OVER_LIMIT", 0, time.Hour)
			now = now.Add(time.Hour)
			// February has 28 days: its budget ends on March 1st, not 30 days on.
			step("February 1st: whole again", 0, "OK OK", 1_000_000, 28*24*time.Hour)
			step("a charge in February", 10, "OK OK", 999_990, 28*24*time.Hour)
			now = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
			step("March 1st", 0, "OK OK", 1_000_000, 31*24*time.Hour)
		})
	}
}
