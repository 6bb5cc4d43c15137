package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

const fairPolicy = `
domain: f
descriptors:
  - key: route
    value: search
    descriptors:
      - key: tenant
        fairness: {tenant_key: tenant, weights: {gold: 3}}
        rate_limit: {unit: second, requests_per_unit: 40}
  - key: other
    rate_limit: {unit: second, requests_per_unit: 1}
`

// TestFairnessSharesOneLimit: two tenants flooding one limit of 40 per
// second split it 3:1 by weight once both have shown demand, share one
// counter, and a request denied by another limit takes nothing.
func TestFairnessSharesOneLimit(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"f.yaml": fairPolicy})
	admitted := map[string]int{}
	for w := 0; w < 3; w++ {
		clear(admitted)
		now := t0.Add(time.Duration(w) * time.Second)
		for i := 0; i < 100; i++ {
			for _, tenant := range []string{"gold", "free"} {
				if decide(t, e, req("f", "route=search,tenant="+tenant), now).Code == engine.CodeOK {
					admitted[tenant]++
				}
			}
		}
		if total := admitted["gold"] + admitted["free"]; total > 40 {
			t.Fatalf("window %d admitted %d > 40", w, total)
		}
	}
	// From the second window on, the fair split of 40 at weights 3:1.
	if admitted["gold"] != 30 || admitted["free"] != 10 {
		t.Fatalf("last window: gold %d, free %d; want 30 and 10", admitted["gold"], admitted["free"])
	}
	snap := e.Snapshot()
	var shares map[string]int64
	for _, s := range snap {
		if s.FairShares != nil {
			shares = s.FairShares
		}
	}
	if shares["gold"] == 0 || shares["free"] == 0 {
		t.Fatalf("fair shares not reported: %v", shares)
	}
	// A request denied by another limit does not reach the fair one.
	now := t0.Add(10 * time.Second)
	decide(t, e, req("f", "other=x"), now)
	for i := 0; i < 50; i++ {
		if got := decide(t, e, req("f", "route=search,tenant=gold", "other=x"), now); got.Code != engine.CodeOverLimit {
			t.Fatalf("denied request %d: %s", i, codes(got))
		}
	}
	n := 0
	for i := 0; i < 50; i++ {
		if decide(t, e, req("f", "route=search,tenant=gold"), now).Code == engine.CodeOK {
			n++
		}
	}
	if n != 40 {
		t.Fatalf("after 50 requests denied elsewhere, gold alone got %d of 40: the denied requests consumed the fair limit", n)
	}
}

// downStore fails every call, as a dead Redis does.
type downStore struct{}

func (downStore) Check(context.Context, string, gale.Rule, int64, time.Time) (gale.Decision, error) {
	return gale.Decision{}, errors.New("connection refused")
}
func (downStore) Lease(context.Context, string, gale.Rule, int64, int64, time.Time) (gale.Grant, error) {
	return gale.Grant{}, errors.New("connection refused")
}
func (downStore) Return(context.Context, string, gale.Rule, int64, time.Time, time.Time) error {
	return errors.New("connection refused")
}
func (downStore) Charge(context.Context, string, gale.Rule, int64, time.Time) (gale.Decision, error) {
	return gale.Decision{}, errors.New("connection refused")
}

func TestFairRuleFollowsOnStoreError(t *testing.T) {
	for _, tc := range []struct {
		policy string
		code   engine.Code
		err    bool
	}{{"allow", engine.CodeOK, false}, {"deny", engine.CodeOverLimit, false}, {"error", 0, true}} {
		e := newEngine(t, downStore{}, map[string]string{"f.yaml": `
domain: f
descriptors:
  - key: tenant
    on_store_error: ` + tc.policy + `
    fairness: {tenant_key: tenant}
    rate_limit: {unit: second, requests_per_unit: 10}
`})
		resp, err := e.Decide(bg, req("f", "tenant=a"), t0)
		if tc.err {
			if !errors.Is(err, gale.ErrStore) {
				t.Errorf("%s: err = %v, want ErrStore", tc.policy, err)
			}
			continue
		}
		if err != nil || resp.Code != tc.code {
			t.Errorf("%s: %v %v, want %v", tc.policy, resp, err, tc.code)
		}
	}
}
