package engine_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
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

	// A fair rule takes a charge as a check of max(n, 1), whole or not at
	// all: its tenants cannot stand past the limit.
	step("fair check-only counts 1", charged(0, "ai", "route=r,tenant=t"), "OK OK", 9)
	step("fair charge 12 is refused, counts nothing", charged(12, "ai", "route=r,tenant=t"), "OVER_LIMIT OVER_LIMIT", 0)
	step("fair charge 9 fits", charged(9, "ai", "route=r,tenant=t"), "OK OK", 0)

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
}
