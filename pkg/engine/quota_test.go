package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

const quotaPolicy = `
domain: q
descriptors:
  - key: tenant
    descriptors:
      - key: path
        value: /api/*
        rate_limit: {name: api, unit: minute, requests_per_unit: 100}
      - key: path
        value: /fast
        rate_limit: {name: fast, unit: second, requests_per_unit: 10}
      - key: path
        value: /bucket
        rate_limit: {name: bucket, unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 10}
      - key: path
        value: /closed
        rate_limit: {name: closed, unit: minute, requests_per_unit: 0}
      - key: path
        value: /open
        rate_limit: {unlimited: true}
  - key: region
    rate_limits:
      - {name: r-minute, unit: minute, requests_per_unit: 50}
      - {name: r-hour, unit: hour, requests_per_unit: 500}
`

// TestResolveQuota: a bucket's unordered entries find the descriptor RLS
// would match with them in order; what RLQS cannot serve is refused by
// name; what matches nothing is no limit.
func TestResolveQuota(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"q.yaml": quotaPolicy})
	cases := []struct {
		name   string
		domain string
		bucket map[string]string
		kind   ratelimit.QuotaKind
		rules  []string
		refuse string
	}{
		{"nested, map order irrelevant", "q", map[string]string{"path": "/api/x", "tenant": "a"}, ratelimit.QuotaLimited, []string{"api"}, ""},
		{"two limits", "q", map[string]string{"region": "eu"}, ratelimit.QuotaLimited, []string{"r-minute", "r-hour"}, ""},
		{"window under 2s", "q", map[string]string{"tenant": "a", "path": "/fast"}, ratelimit.QuotaRefused, nil, "q/fast"},
		{"no window", "q", map[string]string{"tenant": "a", "path": "/bucket"}, ratelimit.QuotaRefused, nil, "q/bucket"},
		{"blocked", "q", map[string]string{"tenant": "a", "path": "/closed"}, ratelimit.QuotaBlocked, nil, ""},
		{"unlimited", "q", map[string]string{"tenant": "a", "path": "/open"}, ratelimit.QuotaNoLimit, nil, ""},
		{"unconsumed entry", "q", map[string]string{"tenant": "a", "path": "/api/x", "x": "y"}, ratelimit.QuotaNoLimit, nil, ""},
		{"no rules at the level", "q", map[string]string{"tenant": "a"}, ratelimit.QuotaNoLimit, nil, ""},
		{"unknown domain", "nope", map[string]string{"tenant": "a"}, ratelimit.QuotaNoLimit, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := e.ResolveQuota(tc.domain, tc.bucket)
			if err != nil {
				t.Fatal(err)
			}
			if q.Kind != tc.kind {
				t.Fatalf("kind %v, want %v (refused: %v)", q.Kind, tc.kind, q.Refused)
			}
			var got []string
			for _, l := range q.Limits {
				got = append(got, l.Rule.Name)
			}
			if strings.Join(got, ",") != strings.Join(tc.rules, ",") {
				t.Errorf("rules %v, want %v", got, tc.rules)
			}
			if tc.refuse != "" && (!errors.Is(q.Refused, ratelimit.ErrQuotaRefused) || !strings.Contains(q.Refused.Error(), tc.refuse)) {
				t.Errorf("refusal %v, want one naming %s", q.Refused, tc.refuse)
			}
		})
	}
}

// TestResolveQuotaBadBuckets: what cannot be a descriptor is an invalid
// request, never a panic.
func TestResolveQuotaBadBuckets(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"q.yaml": quotaPolicy})
	huge := map[string]string{}
	for i := range engine.MaxEntries + 1 {
		huge[strings.Repeat("k", i+1)] = "v"
	}
	for name, tc := range map[string]struct {
		domain string
		bucket map[string]string
	}{
		"no domain":   {"", map[string]string{"a": "b"}},
		"empty":       {"q", nil},
		"empty key":   {"q", map[string]string{"": "b"}},
		"long value":  {"q", map[string]string{"a": strings.Repeat("v", engine.MaxValueBytes+1)}},
		"too many":    {"q", huge},
		"long domain": {strings.Repeat("d", engine.MaxDomainBytes+1), map[string]string{"a": "b"}},
	} {
		if _, err := e.ResolveQuota(tc.domain, tc.bucket); !errors.Is(err, engine.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

// TestQuotaSharesTheRLSCounter: units leased for a bucket are the units RLS
// counts for the same descriptor (one key, one bound), the window end is
// the store's, and returned units are admitted again.
func TestQuotaSharesTheRLSCounter(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"q.yaml": quotaPolicy})
	now := t0.Add(10 * time.Second)
	q, err := e.ResolveQuota("q", map[string]string{"path": "/api/x", "tenant": "a"})
	if err != nil || q.Kind != ratelimit.QuotaLimited {
		t.Fatal(q, err)
	}
	l := q.Limits[0]
	if l.Limit != 100 || l.Window != time.Minute {
		t.Fatalf("limit %d window %v, want 100 per 1m", l.Limit, l.Window)
	}
	g, err := l.Leaser.Lease(bg, l.Key, 1, 98, now)
	if err != nil || g.Granted != 98 {
		t.Fatalf("lease: %+v %v", g, err)
	}
	if want := t0.Add(time.Minute); !g.WindowEnd.Equal(want) {
		t.Errorf("window end %v, want %v", g.WindowEnd, want)
	}
	// RLS sees 2 left.
	r := req("q", "tenant=a,path=/api/x")
	for i, want := range []engine.Code{engine.CodeOK, engine.CodeOK, engine.CodeOverLimit} {
		resp, err := e.Decide(bg, r, now)
		if err != nil || resp.Code != want {
			t.Fatalf("RLS check %d: %v %v, want %v", i, resp, err, want)
		}
	}
	if err := l.Leaser.Return(bg, l.Key, 5, g, now); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.Decide(bg, r, now); resp.Code != engine.CodeOK {
		t.Errorf("after returning 5: %v, want OK", resp.Code)
	}
	// Nothing more than the limit, whatever is asked.
	g2, err := l.Leaser.Lease(bg, l.Key, 1, 1000, now)
	if err != nil || g2.Granted != 4 {
		t.Errorf("second lease %+v %v, want the 4 left", g2, err)
	}
}

// TestQuotaRefusals lists every rule RLQS refuses, by name.
func TestQuotaRefusals(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"q.yaml": quotaPolicy})
	var got []string
	for _, err := range e.QuotaRefusals() {
		got = append(got, err.Error())
	}
	all := strings.Join(got, "\n")
	if len(got) != 2 || !strings.Contains(all, "q/fast") || !strings.Contains(all, "q/bucket") {
		t.Errorf("refusals:\n%s\nwant q/fast and q/bucket", all)
	}
}

// TestQuotaGenerationMovesWithThePolicy: the generation changes at every
// Load that swaps a policy in (even the same one again) and at Close, and
// stays through a Load that fails; the answers it vouches for change only
// with it. An unknown domain's answer says so (the engine counts each).
func TestQuotaGenerationMovesWithThePolicy(t *testing.T) {
	files := map[string]string{"q.yaml": quotaPolicy}
	e := newEngine(t, memstore.New(), files)
	api := map[string]string{"path": "/api/x", "tenant": "a"}
	limitOf := func() int64 {
		t.Helper()
		q, err := e.ResolveQuota("q", api)
		if err != nil || q.Kind != ratelimit.QuotaLimited {
			t.Fatal(q, err)
		}
		return q.Limits[0].Limit
	}
	g0 := e.QuotaGeneration()
	if limitOf() != 100 || e.QuotaGeneration() != g0 {
		t.Fatal("resolving moved the generation")
	}
	if err := e.Load(bg, load(t, map[string]string{"q.yaml": strings.Replace(quotaPolicy, "requests_per_unit: 100}", "requests_per_unit: 7}", 1)})); err != nil {
		t.Fatal(err)
	}
	g1 := e.QuotaGeneration()
	if g1 == g0 || limitOf() != 7 {
		t.Fatalf("a reload to 7: generation %d → %d, limit %d", g0, g1, limitOf())
	}
	if err := e.Load(bg, load(t, map[string]string{"q.yaml": "domain: q\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: gcra, burst: 50}\n"})); err == nil {
		t.Fatal("a bad policy loaded")
	}
	if g := e.QuotaGeneration(); g != g1 {
		t.Errorf("a failed Load moved the generation %d → %d", g1, g)
	}
	if err := e.Load(bg, load(t, map[string]string{"q.yaml": strings.Replace(quotaPolicy, "requests_per_unit: 100}", "requests_per_unit: 7}", 1)})); err != nil {
		t.Fatal(err)
	}
	g2 := e.QuotaGeneration()
	if g2 == g1 {
		t.Errorf("a Load of the same policy kept generation %d", g1)
	}
	if q, err := e.ResolveQuota("nope", api); err != nil || !q.UnknownDomain || q.Kind != ratelimit.QuotaNoLimit {
		t.Errorf("unknown domain: %+v %v", q, err)
	}
	if q, err := e.ResolveQuota("q", api); err != nil || q.UnknownDomain {
		t.Errorf("known domain: %+v %v", q, err)
	}
	if err := e.Close(bg); err != nil {
		t.Fatal(err)
	}
	if g := e.QuotaGeneration(); g == g2 {
		t.Error("Close kept the generation: a kept answer would outlive the engine")
	}
	if _, err := e.ResolveQuota("q", api); err == nil {
		t.Error("a closed engine resolved")
	}
}
