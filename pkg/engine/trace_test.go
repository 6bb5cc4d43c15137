package engine_test

import (
	"fmt"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// TestTraceSaysWhatEachLimitDid: a request carrying a Trace gets, for every
// limit it was checked against, the rule, mode, algorithm, verdict and the
// store round trips it waited for; a denied request's admitted limits are
// marked refunded.
func TestTraceSaysWhatEachLimitDid(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"api.yaml": `
domain: api
descriptors:
  - key: user
    mode: leased
    lease: {batch: 10}
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 100, algorithm: gcra}
  - key: tenant
    rate_limit: {name: tenant, unit: day, requests_per_unit: 2}
  - key: open
    rate_limit: {unlimited: true}
`})
	var tr engine.Trace
	want := func(i int, limits ...engine.TracedLimit) {
		t.Helper()
		r := req("api", "user=u", "tenant=t", "open=x")
		r.Trace = &tr
		decide(t, e, r, t0)
		got := fmt.Sprintf("%+v", tr.Limits)
		if w := fmt.Sprintf("%+v", limits); got != w {
			t.Errorf("request %d: trace\n%s\nwant\n%s", i, got, w)
		}
		sum := 0
		for _, l := range limits {
			sum += l.StoreTrips
		}
		if tr.StoreTrips != sum {
			t.Errorf("request %d: StoreTrips %d, want %d", i, tr.StoreTrips, sum)
		}
	}
	user := engine.TracedLimit{Descriptor: 0, Rule: engine.RuleRef{Domain: "api", Name: "burst"}, Mode: policy.Leased, Algorithm: policy.GCRA, Code: engine.CodeOK}
	tenant := engine.TracedLimit{Descriptor: 1, Rule: engine.RuleRef{Domain: "api", Name: "tenant"}, Mode: policy.Strict, Algorithm: policy.FixedWindow, Code: engine.CodeOK, StoreTrips: 1}
	open := engine.TracedLimit{Descriptor: 2, Rule: engine.RuleRef{Domain: "api", Name: "open"}, Mode: policy.Strict, Code: engine.CodeOK}

	first := user
	first.StoreTrips = 1 // the lease
	want(1, first, tenant, open)
	want(2, user, tenant, open) // served from the leased credits
	deniedTenant, refundedUser := tenant, user
	deniedTenant.Code = engine.CodeOverLimit
	refundedUser.Refunded = true
	want(3, refundedUser, deniedTenant, open)
}
