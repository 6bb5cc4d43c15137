package envoy_test

import (
	"context"
	"testing"

	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"

	// Registered so the typed_config Any values in envoy-rlqs.yaml resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

const rlqsConfigFile = "envoy-rlqs.yaml"

// rlqsFilter returns envoy-rlqs.yaml's rate limit quota filter.
func rlqsFilter(t *testing.T) *rlqsfilterv3.RateLimitQuotaFilterConfig {
	t.Helper()
	b, _ := loadBootstrapFrom(t, rlqsConfigFile)
	validateTree(t, rlqsConfigFile, b)
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					var cfg rlqsfilterv3.RateLimitQuotaFilterConfig
					if hf.GetTypedConfig().UnmarshalTo(&cfg) == nil {
						if hf.GetName() != "envoy.filters.http.rate_limit_quota" {
							t.Errorf("filter named %q", hf.GetName())
						}
						return &cfg
					}
				}
			}
		}
	}
	t.Fatalf("%s has no rate_limit_quota filter", rlqsConfigFile)
	return nil
}

// TestRLQSConfigKeepsTheBound (issue 33, item 5): envoy-rlqs.yaml is a
// valid bootstrap whose quota filter asks the throttlekit cluster (HTTP/2)
// in the shipped policy's domain, and every bucket it builds denies before
// an assignment and after one expires (DENY_ALL, the configuration the
// bound needs), and matches a limit of the shipped policy that the quota
// service serves (a window of at least 2 s).
func TestRLQSConfigKeepsTheBound(t *testing.T) {
	cfg := rlqsFilter(t)
	if got := cfg.GetRlqsServer().GetEnvoyGrpc().GetClusterName(); got != rlsCluster {
		t.Errorf("rlqs_server cluster %q, want %q", got, rlsCluster)
	}
	b, _ := loadBootstrapFrom(t, rlqsConfigFile)
	c := cluster(t, b, rlsCluster)
	if c.GetTypedExtensionProtocolOptions()[httpOptionsName] == nil {
		t.Errorf("cluster %s: no HTTP/2 protocol options", rlsCluster)
	}
	set, err := policy.Load(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	if err := eng.Load(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	matchers := cfg.GetBucketMatchers().GetMatcherList().GetMatchers()
	if len(matchers) == 0 {
		t.Fatal("no bucket matchers")
	}
	for i, m := range matchers {
		var bs rlqsfilterv3.RateLimitQuotaBucketSettings
		if err := m.GetOnMatch().GetAction().GetTypedConfig().UnmarshalTo(&bs); err != nil {
			t.Fatalf("matcher %d: action is not RateLimitQuotaBucketSettings: %v", i, err)
		}
		if r := bs.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule(); r != typev3.RateLimitStrategy_DENY_ALL ||
			bs.GetNoAssignmentBehavior().GetFallbackRateLimit() == nil {
			t.Errorf("matcher %d: no_assignment_behavior %v, want blanket DENY_ALL: a bucket's first request would be admitted unmetered", i, bs.GetNoAssignmentBehavior())
		}
		if e := bs.GetExpiredAssignmentBehavior(); e != nil {
			if fb := e.GetFallbackRateLimit(); fb == nil || fb.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
				t.Errorf("matcher %d: expired_assignment_behavior %v, want blanket DENY_ALL or unset: requests between an expiry and the next window's assignment would be admitted unmetered", i, e)
			}
		}
		// The bucket id, with a sample request's value for what is read
		// from the request, must reach a limit RLQS serves.
		id := map[string]string{}
		for k, v := range bs.GetBucketIdBuilder().GetBucketIdBuilder() {
			id[k] = v.GetStringValue()
			if v.GetCustomValue() != nil {
				id[k] = "/api/users"
			}
		}
		q, err := eng.ResolveQuota(cfg.GetDomain(), id)
		if err != nil || q.Kind != ratelimit.QuotaLimited {
			t.Errorf("matcher %d: bucket %v in domain %s resolves to %v (%v, %v), want a limit the quota service serves", i, id, cfg.GetDomain(), q.Kind, q.Refused, err)
			continue
		}
		t.Logf("matcher %d: bucket %v → rule %s, %d per %v", i, id, q.Limits[0].Rule.Name, q.Limits[0].Limit, q.Limits[0].Window)
	}
}
