package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/throttlekit/throttlekit/pkg/engine"
)

// TestUpstreamCollector: envoyproxy/ratelimit's five names with domain,
// key1 and key2 (empty for one level), rules of one label set summed (two
// limits of one descriptor, paths alike in their first two levels), and
// unlimited rules left out.
func TestUpstreamCollector(t *testing.T) {
	rules := []engine.RuleSnapshot{
		{Ref: engine.RuleRef{Domain: "edge", Name: "login"}, Path: []string{"path_/login"}, Upstream: engine.UpstreamHits{TotalHits: 12, WithinLimit: 10, NearLimit: 2, OverLimit: 2}},
		{Ref: engine.RuleRef{Domain: "edge", Name: "login-day"}, Path: []string{"path_/login"}, Upstream: engine.UpstreamHits{TotalHits: 12, WithinLimit: 12}},
		{Ref: engine.RuleRef{Domain: "api", Name: "deep"}, Path: []string{"tenant", "plan_gold", "user"}, Upstream: engine.UpstreamHits{TotalHits: 3, WithinLimit: 2, OverLimit: 1, ShadowMode: 1}},
		{Ref: engine.RuleRef{Domain: "api", Name: "free"}, Path: []string{"health"}, Algorithm: "unlimited"},
	}
	c := UpstreamCollector{Rules: func() []engine.RuleSnapshot { return rules }}
	if n := testutil.CollectAndCount(c); n != 2*5 {
		t.Fatalf("%d series, want 10: two label sets of five names", n)
	}
	got := gather(t, c)
	for _, tc := range []struct {
		name, domain, key1, key2 string
		want                     float64
	}{
		{"ratelimit_service_rate_limit_total_hits", "edge", "path_/login", "", 24},
		{"ratelimit_service_rate_limit_within_limit", "edge", "path_/login", "", 22},
		{"ratelimit_service_rate_limit_near_limit", "edge", "path_/login", "", 2},
		{"ratelimit_service_rate_limit_over_limit", "api", "tenant", "plan_gold", 1},
		{"ratelimit_service_rate_limit_shadow_mode", "api", "tenant", "plan_gold", 1},
	} {
		found := false
		for _, m := range got[tc.name] {
			if label(m, "domain") == tc.domain && label(m, "key1") == tc.key1 && label(m, "key2") == tc.key2 {
				found = true
				if v := m.GetCounter().GetValue(); v != tc.want {
					t.Errorf("%s{%s,%s,%s} = %v, want %v", tc.name, tc.domain, tc.key1, tc.key2, v, tc.want)
				}
			}
		}
		if !found {
			t.Errorf("no %s{domain=%q,key1=%q,key2=%q}", tc.name, tc.domain, tc.key1, tc.key2)
		}
	}
}
