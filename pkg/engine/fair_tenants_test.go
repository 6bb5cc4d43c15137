package engine_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
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
// b and the overflow: gold 25 of 50, the others 8⅓ each, rounded down or
// up so that the window admits all 50).
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
		// 25 and three shares of 8⅓: the unit the rounding leaves goes
		// to whoever asks for it first.
		in := func(n int) bool { return n == 8 || n == 9 }
		if admitted["gold"] != 25 || !in(admitted["a"]) || !in(admitted["b"]) || !in(overflow) || total != 50 {
			t.Fatalf("window %d: %v (the overflow's tenants %d); want gold 25, a, b and the overflow 8 or 9, 50 in all", w, admitted, overflow)
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

// floodPolicy is the shape of docs/policy.md's fair rule on a fleet: 100
// requests per 10 s shared among up to 1000 tenants.
const floodPolicy = `
domain: f
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant, max_tenants: 1000}
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 100}
`

// TestFairRuleUnderAFloodOfTenantsRedis: two sidecars on one real Redis
// share 100 per 10 s among three steady tenants; then a flood of new
// tenant ids (170 a second, each asking once) begins. Every share is then
// under one unit, and rounded down they were all 0: the rule admitted 26,
// then 0 in every window, to the steady tenants and the flood alike. Work
// conservation wants each window to admit the limit less what the two
// sidecars may strand (a lease quantum each), and each steady tenant,
// still asking, its share rounded up: at least one.
func TestFairRuleUnderAFloodOfTenantsRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := testenv.StartRedis(t)
	store, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	// Redis expires keys on its own clock: the timeline lies ahead of it.
	begin := time.Now().Add(48 * time.Hour).Truncate(24 * time.Hour)
	engines := []*engine.Engine{
		newEngine(t, store, map[string]string{"f.yaml": floodPolicy}),
		newEngine(t, store, map[string]string{"f.yaml": floodPolicy}),
	}
	const window, limit, quantum = 10 * time.Second, 100, 5
	steady := []string{"s1", "s2", "s3"}
	flood := 0
	for w := range 5 {
		start := begin.Add(time.Duration(w) * window)
		admitted := map[string]int{}
		total, asking := 0, 0
		// 100 ms steps: each steady tenant asks 4 times a second, on
		// both sidecars in turn; from the second window 17 new ids a
		// step (170 a second) ask once each.
		for step := range 100 {
			now := start.Add(time.Duration(step) * window / 100)
			var calls []string
			if step%2 == 0 {
				calls = append(calls, steady...)
			}
			if w > 0 {
				for range 17 {
					flood++
					calls = append(calls, fmt.Sprintf("new%06d", flood))
				}
			}
			asking += len(calls)
			for i, tenant := range calls {
				if decide(t, engines[(i+step)%2], req("f", "tenant="+tenant), now).Code == engine.CodeOK {
					admitted[tenant]++
					total++
				}
			}
		}
		t.Logf("window %d: %d admitted; steady %d %d %d", w, total, admitted["s1"], admitted["s2"], admitted["s3"])
		if total > limit {
			t.Fatalf("window %d: the fleet admitted %d > %d", w, total, limit)
		}
		if total < limit-2*quantum {
			t.Errorf("window %d: the fleet admitted %d, want at least %d (the limit less a lease quantum per sidecar) of %d asked", w, total, limit-2*quantum, asking)
		}
		for _, s := range steady {
			if w > 1 && admitted[s] < 1 {
				t.Errorf("window %d: steady tenant %s admitted nothing, want its share rounded up (≥ 1)", w, s)
			}
		}
	}
}
