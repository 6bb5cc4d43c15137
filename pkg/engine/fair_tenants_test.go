package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestFairAdmitsManyTenantsWithinTheBudget: 150 tenants asking one unit each
// of a fair limit of 100,000 a minute are all admitted, in the first window
// and the next (a hard-coded table of 100 tenants used to deny 50 of them,
// for two windows, with the budget untouched).
func TestFairAdmitsManyTenantsWithinTheBudget(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"f.yaml": `
domain: f
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant}
    rate_limit: {unit: minute, requests_per_unit: 100000}
`})
	for w := range 2 {
		now := t0.Add(time.Duration(w) * time.Minute)
		denied := 0
		for i := range 150 {
			if got := decide(t, e, req("f", fmt.Sprintf("tenant=t%03d", i)), now); got.Code != engine.CodeOK {
				denied++
			}
		}
		if denied > 0 {
			t.Errorf("window %d: %d of 150 tenants asking one unit each of 100,000 denied", w, denied)
		}
	}
}

// TestFairTenantsPastMaxTenants: past max_tenants a new tenant is admitted
// from the overflow account while the budget has room; under a flood the
// cap holds, the configured tenant keeps its guarantee, and the tenants past
// the bound share one default tenant's share (W = 3 for gold, 1 each for a,
// b and the overflow: gold 25 of 50, the others 8 each, rounded down).
func TestFairTenantsPastMaxTenants(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"f.yaml": `
domain: f
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant, weights: {gold: 3}, max_tenants: 2}
    rate_limit: {unit: minute, requests_per_unit: 50}
`})
	others := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for _, tenant := range others[:5] {
		if got := decide(t, e, req("f", "tenant="+tenant), t0); got.Code != engine.CodeOK {
			t.Fatalf("%s, past max_tenants 2 with the budget untouched: %s, want OK", tenant, codes(got))
		}
	}
	if s := fairShares(e); s["_overflow"] != 3 {
		t.Fatalf("fair shares %v, want _overflow 3 (c, d and e)", s)
	}
	for w := 1; w <= 3; w++ {
		now := t0.Add(time.Duration(w) * time.Minute)
		admitted := map[string]int{}
		for range 100 {
			for _, tenant := range append([]string{"gold"}, others...) {
				if decide(t, e, req("f", "tenant="+tenant), now).Code == engine.CodeOK {
					admitted[tenant]++
				}
			}
		}
		total, overflow := 0, 0
		for tenant, n := range admitted {
			total += n
			if tenant != "gold" && tenant != "a" && tenant != "b" {
				overflow += n
			}
		}
		if total > 50 {
			t.Fatalf("window %d admitted %d > 50: %v", w, total, admitted)
		}
		if w == 1 {
			continue // demand is revealed as the window goes: first come
		}
		if admitted["gold"] != 25 || admitted["a"] != 8 || admitted["b"] != 8 || overflow != 8 {
			t.Fatalf("window %d: %v (the overflow's tenants %d); want gold 25, a 8, b 8, the overflow 8", w, admitted, overflow)
		}
	}
}

// fairShares is the fair rule's FairShares of e's snapshot.
func fairShares(e *engine.Engine) map[string]int64 {
	for _, s := range e.Snapshot() {
		if s.FairShares != nil {
			return s.FairShares
		}
	}
	return nil
}
