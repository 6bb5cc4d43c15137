package source_test

import (
	"errors"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

func TestBuildSetErrors(t *testing.T) {
	noName := limitConfig("", "edge", "k", 1)
	deep := limitConfig("deep", "edge", "k", 1)
	d := deep.Descriptors[0]
	for range 40 {
		d.Descriptors = []*rlsconfv3.RateLimitDescriptor{{Key: "k"}}
		d = d.Descriptors[0]
	}
	noKey := limitConfig("nokey", "edge", "", 1)
	for _, tc := range []struct {
		name string
		cfgs []*rlsconfv3.RateLimitConfig
		want []string
	}{
		{"empty push", nil, []string{"no RateLimitConfig", "push at least one"}},
		{"resource without a name", []*rlsconfv3.RateLimitConfig{noName}, []string{`domain "edge" has no name`}},
		{"two resources, one name", []*rlsconfv3.RateLimitConfig{limitConfig("a", "x", "k", 1), limitConfig("a", "y", "k", 1)}, []string{`RateLimitConfig "a": name: two resources`}},
		{"one domain twice", []*rlsconfv3.RateLimitConfig{limitConfig("a", "x", "k", 1), limitConfig("b", "x", "k", 1)}, []string{"xds:RateLimitConfig/b", "already defined in xds:RateLimitConfig/a"}},
		{"too deep", []*rlsconfv3.RateLimitConfig{deep}, []string{`RateLimitConfig "deep"`, "deeper than 32"}},
		{"descriptor without key", []*rlsconfv3.RateLimitConfig{noKey}, []string{"xds:RateLimitConfig/nokey", "descriptors[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := source.BuildSet(tc.cfgs, nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := source.BuildSet(nil, nil); !errors.Is(err, source.ErrNoResources) {
		t.Errorf("empty push: %v, want ErrNoResources", err)
	}
}

func TestDecodeResourcesNamesTheBadOne(t *testing.T) {
	good, _ := anypb.New(limitConfig("a", "x", "k", 1))
	other, _ := anypb.New(&rlsconfv3.RateLimitDescriptor{Key: "k"})
	_, err := source.DecodeResources([]*anypb.Any{good, other})
	if err == nil || !strings.Contains(err.Error(), "resource 1 has type") {
		t.Fatalf("error %v", err)
	}
	broken := &anypb.Any{TypeUrl: source.RateLimitConfigType, Value: []byte{0xff, 0xff}}
	if _, err := source.DecodeResources([]*anypb.Any{broken}); err == nil || !strings.Contains(err.Error(), "resource 0: not a RateLimitConfig") {
		t.Fatalf("error %v", err)
	}
}

// TestOverlay: the overlay adds extensions to pushed descriptors (inside
// rate_limit too) and gates to the domain, loads domain-less files as they
// are, ignores domains not pushed, and refuses to override or invent.
func TestOverlay(t *testing.T) {
	pushed := []*rlsconfv3.RateLimitConfig{{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10},
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "path", Value: "/login", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 5}}}},
		{Key: "user"},
	}}}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // an error's text; "" for a set
		check func(t *testing.T, set *policy.Set)
	}{
		{name: "extensions added", files: map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: remote_address
    mode: leased
    rate_limit: {algorithm: gcra, burst: 20}
    descriptors:
      - key: path
        value: /login
        on_store_error: deny
  - key: user
    rate_limit: {unit: week, requests_per_unit: 3}
`}, check: func(t *testing.T, set *policy.Set) {
			ra := set.Domains[0].Descriptors[0]
			if ra.Mode != policy.Leased || ra.Limits[0].Algorithm != policy.GCRA || ra.Limits[0].Burst != 20 || ra.Limits[0].RequestsPerUnit != 10 {
				t.Errorf("remote_address %+v, limit %+v", ra, ra.Limits[0])
			}
			if p := ra.Descriptors[0]; p.OnStoreError != policy.OnErrorDeny || p.Limits[0].RequestsPerUnit != 5 {
				t.Errorf("path %+v", p)
			}
			if u := set.Domains[0].Descriptors[1]; len(u.Limits) != 1 || u.Limits[0].Unit != policy.Week {
				t.Errorf("user %+v", u)
			}
		}},
		{name: "gates for the domain and a gate-only file", files: map[string]string{
			"edge.yaml":  "domain: edge\nconcurrency:\n  - name: api\n    match: {path_prefix: /api}\n",
			"gates.yaml": "concurrency:\n  - name: all\n    match: {path_prefix: /}\n",
		}, check: func(t *testing.T, set *policy.Set) {
			if len(set.Gates) != 2 {
				t.Errorf("%d gates, want 2", len(set.Gates))
			}
		}},
		{name: "a domain not pushed is ignored", files: map[string]string{"other.yaml": "domain: other\ndescriptors:\n  - key: x\n    mode: leased\n"},
			check: func(t *testing.T, set *policy.Set) {
				if len(set.Domains) != 1 {
					t.Errorf("%d domains", len(set.Domains))
				}
			}},
		{name: "overriding a pushed field", files: map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {requests_per_unit: 99}\n"},
			want: "edge.yaml:4: descriptors[0].rate_limit.requests_per_unit: the pushed resource sets this already"},
		{name: "a descriptor that matches nothing", files: map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: remote_adress\n    mode: leased\n"},
			want: `edge.yaml:3: descriptors[0]: no pushed descriptor has key "remote_adress"`},
		{name: "a bad extension value", files: map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: user\n    mode: turbo\n"},
			want: "xds:RateLimitConfig/edge"},
		{name: "two overlays for one domain", files: map[string]string{"a.yaml": "domain: edge\n", "b.yaml": "domain: edge\n"},
			want: "one overlay file per domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				writeFile(t, dir, name, data)
			}
			o, err := source.LoadOverlay(dir)
			var set *policy.Set
			if err == nil {
				set, err = source.BuildSet(pushed, o)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, set)
		})
	}
}
