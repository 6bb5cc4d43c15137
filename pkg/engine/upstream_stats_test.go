package engine_test

import (
	"slices"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestUpstreamHits: each rule's hits counted as envoyproxy/ratelimit's
// base_limiter.go counts them (total, within, near past ⌊0.8 L⌋, over,
// shadow), under the descriptor path its statistics are named by. Limit 10:
// twelve requests of one hit are 12 total, 10 within, 2 near (the 9th
// and 10th), 2 over; then a request of 5 at a count of 7 (another key)
// crosses both thresholds: 2 over, 2 near, 5 total. A shadow limit of 2:
// three requests are 2 within, 1 near, 1 over, 1 shadow.
func TestUpstreamHits(t *testing.T) {
	e, err := engine.New(engine.Options{Store: memstore.New(), UpstreamHits: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(bg) })
	if err := e.Load(bg, load(t, map[string]string{"u.yaml": `domain: u
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: path
    value: /s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant
    descriptors:
      - key: plan
        value: gold
        rate_limit: {unit: hour, requests_per_unit: 100}
`})); err != nil {
		t.Fatal(err)
	}
	for range 12 {
		decide(t, e, req("u", "user=a"), t0)
	}
	for range 7 {
		decide(t, e, req("u", "user=b"), t0)
	}
	five := req("u", "user=b")
	five.HitsAddend = 5
	decide(t, e, five, t0)
	for range 3 {
		decide(t, e, req("u", "path=/s"), t0)
	}
	decide(t, e, req("u", "tenant=x,plan=gold"), t0)
	want := map[string]engine.UpstreamHits{
		"user":             {TotalHits: 12 + 7 + 5, WithinLimit: 10 + 7, NearLimit: 2 + 2, OverLimit: 2 + 2},
		"path_/s":          {TotalHits: 3, WithinLimit: 2, NearLimit: 1, OverLimit: 1, ShadowMode: 1},
		"tenant.plan_gold": {TotalHits: 1, WithinLimit: 1},
	}
	seen := 0
	for _, s := range e.Snapshot() {
		key := ""
		for i, p := range s.Path {
			if i > 0 {
				key += "."
			}
			key += p
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("rule %v: path %q not expected", s.Ref, s.Path)
			continue
		}
		seen++
		if s.Upstream != w {
			t.Errorf("%s: %+v, want %+v", key, s.Upstream, w)
		}
	}
	if seen != len(want) {
		t.Errorf("%d rules seen, want %d", seen, len(want))
	}
	if s := e.Snapshot(); !slices.ContainsFunc(s, func(r engine.RuleSnapshot) bool { return slices.Equal(r.Path, []string{"tenant", "plan_gold"}) }) {
		t.Error("no rule with the nested path tenant, plan_gold")
	}
}
