package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

var (
	bg = context.Background()
	t0 = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
)

// load parses files (name → YAML) into a set.
func load(t testing.TB, files map[string]string) *policy.Set {
	t.Helper()
	set := &policy.Set{}
	for name, src := range files {
		d, err := policy.Parse(name, []byte(src))
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		set.Domains = append(set.Domains, d)
	}
	return set
}

// newEngine returns an engine on s loaded with files, closed on cleanup.
// Its store calls are bounded by testenv.StoreDeadline, not gale's 50ms: the
// tests that use it judge answers, not the store's latency, and a loaded
// machine misses 50ms now and then (TestFairnessAcrossAFleetRedis failed
// so, on a Decide whose store call timed out). A test about the store
// timeout builds its engine with the timeout it measures.
func newEngine(t testing.TB, s gale.Store, files map[string]string) *engine.Engine {
	t.Helper()
	e, err := engine.New(engine.Options{Store: s, StoreTimeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(bg, load(t, files)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(bg) })
	return e
}

// req builds a request: each descriptor is "k=v,k2=v2".
func req(domain string, descs ...string) *engine.Request {
	r := &engine.Request{Domain: domain}
	for _, d := range descs {
		var desc engine.Descriptor
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			desc.Entries = append(desc.Entries, engine.Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, desc)
	}
	return r
}

func decide(t testing.TB, e *engine.Engine, r *engine.Request, now time.Time) *engine.Response {
	t.Helper()
	resp, err := e.Decide(bg, r, now)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return resp
}

// codes is the overall code then each status code, e.g. "OVER_LIMIT OK OVER_LIMIT".
func codes(r *engine.Response) string {
	s := r.Code.String()
	for _, st := range r.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

const edge = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 10.0.0.66
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: path
    value: /api/*/orders
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
  - key: client
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2}
`

func TestMatchingPrecedenceAndDepth(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	for _, tc := range []struct {
		name  string
		req   *engine.Request
		times int
		want  string
		limit uint32
	}{
		{"key only: each value its own limit", req("edge", "remote_address=1.1.1.1"), 3, "OK OK", 3},
		{"exact value beats key only", req("edge", "remote_address=10.0.0.66"), 2, "OVER_LIMIT OVER_LIMIT", 1},
		{"requests_per_unit 0 blocks", req("edge", "remote_address=50.0.0.5"), 1, "OVER_LIMIT OVER_LIMIT", 0},
		{"infix wildcard", req("edge", "path=/api/v2/orders"), 3, "OVER_LIMIT OVER_LIMIT", 2},
		{"wildcard does not match elsewhere", req("edge", "path=/api/v2/users"), 5, "OK OK", 0},
		{"unlimited", req("edge", "internal=x"), 10, "OK OK", 0},
		{"nested, depth 2", req("edge", "client=acme,user=u1"), 2, "OK OK", 2},
		{"request deeper than the rule", req("edge", "remote_address=1.1.1.9,user=u1"), 5, "OK OK", 0},
		{"request shallower than the rule", req("edge", "client=acme"), 5, "OK OK", 0},
		{"unknown domain", req("nope", "remote_address=1.1.1.1"), 5, "OK OK", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r *engine.Response
			for i := 0; i < tc.times; i++ {
				r = decide(t, e, tc.req, t0)
			}
			if got := codes(r); got != tc.want {
				t.Fatalf("after %d: %s, want %s", tc.times, got, tc.want)
			}
			if l := r.Statuses[0].Limit; tc.limit > 0 && (l == nil || l.RequestsPerUnit != tc.limit) {
				t.Fatalf("status limit %+v, want %d", l, tc.limit)
			}
		})
	}
}

func TestShareThresholdSharesOneCounter(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	decide(t, e, req("edge", "path=/files/a.pdf"), t0)
	decide(t, e, req("edge", "path=/files/b.csv"), t0)
	if got := codes(decide(t, e, req("edge", "path=/files/c.txt"), t0)); got != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("third file: %s: wildcard values did not share the threshold", got)
	}
	// Without share_threshold every value matching /api/*/orders counts alone.
	decide(t, e, req("edge", "path=/api/a/orders"), t0)
	decide(t, e, req("edge", "path=/api/a/orders"), t0)
	if got := codes(decide(t, e, req("edge", "path=/api/b/orders"), t0)); got != "OK OK" {
		t.Fatalf("another value: %s", got)
	}
}

// TestHostileValuesDoNotShareCounters: values built to collide under a naive
// key join ("a:b" + "c" vs "a" + "b:c", separators, digits that look like
// length prefixes) each keep their own counter.
func TestHostileValuesDoNotShareCounters(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"h.yaml": `
domain: h
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: minute, requests_per_unit: 1}
`})
	pairs := [][2]string{
		{"x:y", "z"}, {"x", "y:z"}, {"x_y", "z"}, {"x", "y_z"}, {"1:x", "1:y"}, {"1", "x1:1:y"},
		{"x.y", "z"}, {"x", "y.z"}, {"", "xyz"}, {"xyz", ""}, {"{x}", "y"}, {"x", "}y{"}, {"x\x00", "y"}, {"x", "\x00y"},
	}
	for _, p := range pairs {
		r := &engine.Request{Domain: "h", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "a", Value: p[0]}, {Key: "b", Value: p[1]}}}}}
		if got := decide(t, e, r, t0); got.Code != engine.CodeOK {
			t.Fatalf("(%q, %q) found its counter already used: another value list shares it", p[0], p[1])
		}
	}
}

func TestHitsAddend(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	r := req("edge", "remote_address=2.2.2.2")
	r.HitsAddend = 2
	if got := decide(t, e, r, t0); got.Code != engine.CodeOK || got.Statuses[0].Remaining != 1 {
		t.Fatalf("request hits 2 of 3: %+v", got.Statuses[0])
	}
	one := uint64(1)
	r.Descriptors[0].HitsAddend = &one // descriptor level overrides the request's
	if got := decide(t, e, r, t0); got.Code != engine.CodeOK || got.Statuses[0].Remaining != 0 {
		t.Fatalf("descriptor hits 1: %+v", got.Statuses[0])
	}
	zero := uint64(0)
	r.Descriptors[0].HitsAddend = &zero // 0 checks without counting: OK at the limit exactly
	if got := decide(t, e, r, t0); got.Code != engine.CodeOK || got.Statuses[0].Remaining != 0 {
		t.Fatalf("descriptor hits 0 at the limit: %s %+v", codes(got), got.Statuses[0])
	}
	if got := decide(t, e, req("edge", "remote_address=2.2.2.2"), t0); got.Code != engine.CodeOverLimit {
		t.Fatalf("a plain request after the check-only call: %s", codes(got))
	}
}

func TestSeveralLimitsAndDeniedConsumesNothing(t *testing.T) {
	for _, mode := range []string{"strict", "cached_deny", "leased"} {
		t.Run(mode, func(t *testing.T) {
			e := newEngine(t, memstore.New(), map[string]string{"api.yaml": fmt.Sprintf(`
domain: api
descriptors:
  - key: user
    mode: %s
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2, algorithm: token_bucket}
      - {name: daily, unit: day, requests_per_unit: 5}
  - key: tenant
    rate_limit: {name: tenant, unit: day, requests_per_unit: 3}
`, mode)})
			// Two descriptors: user (2/s, 5/day) and tenant (3/day). The
			// tenant's 3/day runs out first; denied requests take nothing
			// from the user's limits.
			now := t0
			for i := 0; i < 3; i++ {
				if got := decide(t, e, req("api", "user=u", "tenant=t"), now); got.Code != engine.CodeOK {
					t.Fatalf("request %d: %s", i, codes(got))
				}
				now = now.Add(time.Second)
			}
			for i := 0; i < 10; i++ {
				got := decide(t, e, req("api", "user=u", "tenant=t"), now)
				if got.Code != engine.CodeOverLimit || got.Statuses[1].Code != engine.CodeOverLimit || got.Statuses[0].Code != engine.CodeOK {
					t.Fatalf("denied request %d: %s", i, codes(got))
				}
				now = now.Add(time.Second)
			}
			// The user's daily limit lost nothing to the 10 denied requests:
			// 5 − 3 = 2 are left.
			for i := 0; i < 2; i++ {
				if got := decide(t, e, req("api", "user=u"), now); got.Code != engine.CodeOK {
					t.Fatalf("user's remaining daily request %d: %s (%+v)", i, codes(got), got.Statuses[0])
				}
				now = now.Add(time.Second)
			}
			if got := decide(t, e, req("api", "user=u"), now); got.Code != engine.CodeOverLimit || got.Statuses[0].Limit.Name != "daily" {
				t.Fatalf("sixth: %s %+v", codes(got), got.Statuses[0].Limit)
			}
		})
	}
}

func TestShadowReplacesAndQuota(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"x.yaml": `
domain: x
descriptors:
  - key: soft
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: k1
    value: v1
    descriptors:
      - key: user
        rate_limit: {name: specific, unit: minute, requests_per_unit: 1}
  - key: k2
    value: v2
    descriptors:
      - key: user
        rate_limit: {replaces: [{name: specific}], unit: minute, requests_per_unit: 3}
  - key: plan_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plan_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`})
	for i := 0; i < 3; i++ {
		if got := decide(t, e, req("x", "soft=a"), t0); got.Code != engine.CodeOK || got.Statuses[0].Code != engine.CodeOK {
			t.Fatalf("shadow %d: %s", i, codes(got))
		}
	}
	// Both user rules apply; "specific" (1/min) is replaced by the 3/min one.
	for i := 0; i < 3; i++ {
		got := decide(t, e, req("x", "k1=v1,user=u", "k2=v2,user=u"), t0)
		if got.Code != engine.CodeOK {
			t.Fatalf("replaced request %d: %s", i, codes(got))
		}
		if got.Statuses[0].Limit != nil {
			t.Fatalf("the replaced limit still reports: %+v", got.Statuses[0])
		}
	}
	if got := decide(t, e, req("x", "k1=v1,user=u", "k2=v2,user=u"), t0); got.Code != engine.CodeOverLimit {
		t.Fatalf("fourth: %s", codes(got))
	}
	// The replaced limit was not touched: alone it still admits one.
	if got := decide(t, e, req("x", "k1=v1,user=u"), t0); got.Code != engine.CodeOK {
		t.Fatalf("replaced limit consumed: %s", codes(got))
	}
	// Quota mode: over one quota is reported but admitted; over all is denied.
	decide(t, e, req("x", "plan_a=c", "plan_b=c"), t0)
	got := decide(t, e, req("x", "plan_a=c", "plan_b=c"), t0)
	if got.Code != engine.CodeOK || !got.QuotaMode || fmt.Sprint(got.QuotaViolations) != "[0]" {
		t.Fatalf("one quota over: %s %v", codes(got), got.QuotaViolations)
	}
	got = decide(t, e, req("x", "plan_a=c", "plan_b=c"), t0)
	if got.Code != engine.CodeOverLimit || fmt.Sprint(got.QuotaViolations) != "[0 1]" {
		t.Fatalf("every quota over: %s %v", codes(got), got.QuotaViolations)
	}
}

func TestGlobalShadow(t *testing.T) {
	e, err := engine.New(engine.Options{Store: memstore.New(), Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(bg, load(t, map[string]string{"edge.yaml": edge})); err != nil {
		t.Fatal(err)
	}
	defer e.Close(bg)
	for i := 0; i < 5; i++ {
		if got := decide(t, e, req("edge", "remote_address=10.0.0.66"), t0); got.Code != engine.CodeOK {
			t.Fatalf("global shadow enforced: %s", codes(got))
		}
	}
	for _, s := range e.Snapshot() {
		if s.Ref.Name == "remote_address_10.0.0.66" && (s.Decisions.Shadow != 4 || s.Decisions.OK != 1) {
			t.Fatalf("counters %+v", s.Decisions)
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	huge := uint64(1) << 50
	many := &engine.Request{Domain: "edge"}
	for i := 0; i < 5000; i++ {
		many.Descriptors = append(many.Descriptors, engine.Descriptor{Entries: []engine.Entry{{Key: "k", Value: "v"}}})
	}
	for _, tc := range []struct {
		name string
		req  *engine.Request
	}{
		{"no domain", req("", "a=b")},
		{"no descriptors", &engine.Request{Domain: "edge"}},
		{"empty key", req("edge", "=v")},
		{"empty descriptor", &engine.Request{Domain: "edge", Descriptors: []engine.Descriptor{{}}}},
		{"thousands of descriptors", many},
		{"hits overflow", &engine.Request{Domain: "edge", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k"}}, HitsAddend: &huge}}}},
		{"override without unit", &engine.Request{Domain: "edge", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k"}}, Override: &engine.Override{RequestsPerUnit: 1}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.Decide(bg, tc.req, t0); !errors.Is(err, engine.ErrInvalidRequest) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestOverrideAndNegativeHits(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	r := req("edge", "custom=1")
	r.Descriptors[0].Override = &engine.Override{RequestsPerUnit: 2, Unit: policy.Minute}
	decide(t, e, r, t0)
	decide(t, e, r, t0)
	if got := decide(t, e, r, t0); got.Code != engine.CodeOverLimit || got.Statuses[0].Limit.RequestsPerUnit != 2 {
		t.Fatalf("override: %s", codes(got))
	}
	// is_negative_hits gives one back.
	neg := req("edge", "remote_address=7.7.7.7")
	for i := 0; i < 3; i++ {
		decide(t, e, neg, t0)
	}
	neg.Descriptors[0].Negative = true
	decide(t, e, neg, t0)
	neg.Descriptors[0].Negative = false
	if got := decide(t, e, neg, t0); got.Code != engine.CodeOK {
		t.Fatalf("after a negative hit: %s", codes(got))
	}
}

func TestHeaderStatusIsClosestToItsLimit(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"edge.yaml": edge})
	got := decide(t, e, req("edge", "internal=1", "remote_address=3.3.3.3", "path=/api/x/orders"), t0)
	if got.HeaderStatus != 2 || got.Statuses[2].Remaining != 1 {
		t.Fatalf("header status %d (%+v)", got.HeaderStatus, got.Statuses)
	}
	if got := decide(t, e, req("edge", "nothing=here"), t0); got.HeaderStatus != -1 {
		t.Fatalf("no limit, header status %d", got.HeaderStatus)
	}
}
