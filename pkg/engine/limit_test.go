package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

const fairOnly = `
domain: f
descriptors:
  - key: tenant
    %SHADOW%fairness: {tenant_key: tenant}
    rate_limit: {unit: second, requests_per_unit: 2}
`

func fairFiles(shadow bool) map[string]string {
	src := fairOnly
	if shadow {
		return map[string]string{"f.yaml": strings.ReplaceAll(src, "%SHADOW%", "shadow_mode: true\n    ")}
	}
	return map[string]string{"f.yaml": strings.ReplaceAll(src, "%SHADOW%", "")}
}

// TestNegativeHitOnAFairRule: a fair rule's escrow keeps what it admitted,
// so a negative hit on it gives nothing back — and answers OK, as on any
// other rule (it used to dereference the fair rule's missing limiter).
func TestNegativeHitOnAFairRule(t *testing.T) {
	e := newEngine(t, memstore.New(), fairFiles(false))
	for i := range 2 {
		if got := decide(t, e, req("f", "tenant=a"), t0); got.Code != engine.CodeOK {
			t.Fatalf("request %d: %s", i, codes(got))
		}
	}
	neg := req("f", "tenant=a")
	neg.Descriptors[0].Negative = true
	if got := decide(t, e, neg, t0); got.Code != engine.CodeOK || got.Statuses[0].Limit == nil {
		t.Fatalf("negative hit: %s %+v", codes(got), got.Statuses[0])
	}
	if got := decide(t, e, req("f", "tenant=a"), t0); got.Code != engine.CodeOverLimit {
		t.Fatalf("after the negative hit: %s, want OVER_LIMIT: the escrow gives nothing back", codes(got))
	}
}

// TestShadowFairRuleReportsOK: a shadow fair rule over its limit counts the
// denial and reports OK, as every shadow rule does (it used to report its
// descriptor OVER_LIMIT under an OK response).
func TestShadowFairRuleReportsOK(t *testing.T) {
	e := newEngine(t, memstore.New(), fairFiles(true))
	for i := range 3 {
		got := decide(t, e, req("f", "tenant=a"), t0)
		if got.Code != engine.CodeOK || got.Statuses[0].Code != engine.CodeOK {
			t.Fatalf("request %d: %s", i, codes(got))
		}
	}
	if d := e.Snapshot()[0].Decisions; d.OK != 2 || d.Shadow != 1 {
		t.Fatalf("decisions %+v, want 2 OK and 1 shadow denial", d)
	}
}

const handoverPolicy = `
domain: h
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: b
    mode: leased
    lease: {batch: %BATCH%}
    rate_limit: {unit: hour, requests_per_unit: 6}
`

func handoverFiles(batch int) map[string]string {
	return map[string]string{"h.yaml": strings.ReplaceAll(handoverPolicy, "%BATCH%", fmt.Sprint(batch))}
}

// TestReloadHandsOverToRequestsInFlight: a request holding the policy a
// reload replaces goes on with that policy's limiters, although the reload
// retired one of them and has returned; the limiter is closed — its
// leased credits returned — once the request is done.
func TestReloadHandsOverToRequestsInFlight(t *testing.T) {
	ms := memstore.New()
	s := &holdStore{Store: ms, marker: "held"}
	e := newEngine(t, s, handoverFiles(5))
	release := sync.OnceFunc(s.hold())
	defer release()
	type answer struct {
		resp *engine.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		// a is checked first and waits in the store; b is checked after.
		resp, err := e.Decide(bg, req("h", "a=held", "b=k"), t0)
		done <- answer{resp, err}
	}()
	if !testenv.Eventually(func() bool { return s.arrived.Load() == 1 }) {
		t.Fatal("the request's check of a did not reach the store")
	}
	// b's batch changes: its limiter is retired while the request holds it.
	if err := e.Load(bg, load(t, handoverFiles(4))); err != nil {
		t.Fatal(err)
	}
	release()
	got := <-done
	if got.err != nil || got.resp.Code != engine.CodeOK {
		t.Fatalf("the request in flight: %v %v", got.resp, got.err)
	}
	// The retired limiter leased 5 of b's 6 and served 1; its 4 unused
	// credits go back once the request is done (a goroutine closes it:
	// Close waits for it).
	if err := e.Close(bg); err != nil {
		t.Fatal(err)
	}
	e2 := newEngine(t, ms, handoverFiles(1))
	for i := range 5 {
		if got := decide(t, e2, req("h", "b=k"), t0); got.Code != engine.CodeOK {
			t.Fatalf("request %d of the 5 left: %s — the retired limiter's credits were not returned", i, codes(got))
		}
	}
}

// TestOverrideRulesAreBounded: requests carrying more distinct override
// limits than MaxOverrideRules, concurrently, each get their own limit's
// answer; dropped rules' limiters are closed only once no request uses
// them (no request fails), and a limit asked again counts on.
func TestOverrideRulesAreBounded(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	overridden := func(n uint32, key string) *engine.Request {
		r := req("edge", "custom="+key)
		r.Descriptors[0].Override = &engine.Override{RequestsPerUnit: n, Unit: policy.Hour}
		return r
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint32(1); n <= 2*engine.MaxOverrideRules; n++ {
				resp, err := e.Decide(bg, overridden(n, fmt.Sprint(g)), t0)
				if err != nil {
					errs <- err
					return
				}
				if st := resp.Statuses[0]; st.Code != engine.CodeOK || st.Limit.RequestsPerUnit != n || st.Remaining != n-1 {
					errs <- fmt.Errorf("limit %d, key %d: %+v", n, g, st)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Limit 1 was dropped long ago; its count is in the store, not in the
	// limiter, so a new limiter for it finds it used up.
	if got := decide(t, e, overridden(1, "0"), t0); got.Code != engine.CodeOverLimit {
		t.Fatalf("limit 1 asked again: %s", codes(got))
	}
	if err := e.Close(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Decide(bg, overridden(1, "0"), t0); err == nil {
		t.Fatal("a request after Close was answered")
	}
}

// TestOverrideStoreFailure: an override limit is strict with on_store_error
// "error", as before it had a limiter: the store's failure is returned,
// wrapping gale.ErrStore, and the request's other units are refunded.
func TestOverrideStoreFailure(t *testing.T) {
	e := newEngine(t, downStore{}, map[string]string{"edge.yaml": edge})
	r := req("edge", "custom=1")
	r.Descriptors[0].Override = &engine.Override{RequestsPerUnit: 3, Unit: policy.Minute}
	_, err := e.Decide(bg, r, t0)
	if !errors.Is(err, gale.ErrStore) {
		t.Fatalf("err = %v, want ErrStore", err)
	}
	// The adapters, which know no gale, see it as ratelimit.ErrStore; it
	// reads as the store's error did.
	if !errors.Is(err, ratelimit.ErrStore) || !strings.HasPrefix(err.Error(), "gale: store failed: ") {
		t.Fatalf("err = %v, want it to wrap ratelimit.ErrStore and read as gale's", err)
	}
	// A blocked override never reaches the store.
	r.Descriptors[0].Override.RequestsPerUnit = 0
	if got := decide(t, e, r, t0.Add(10*time.Second)); got.Code != engine.CodeOverLimit || got.Statuses[0].UntilReset != 50*time.Second {
		t.Fatalf("blocked override: %s %+v", codes(got), got.Statuses[0])
	}
}
