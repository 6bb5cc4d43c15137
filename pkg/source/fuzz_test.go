package source

import (
	"errors"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

func fuzzSeeds() [][]byte {
	cfgs := []*rlsconfv3.RateLimitConfig{
		{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "remote_address",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10, Name: "per-ip"}}}},
		{Name: "api", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "user", Value: "yes", ShadowMode: true, DetailedMetric: true,
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "path", Value: "/a/*",
				RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "per-ip"}}}}}}}},
		{Name: "weird", Domain: "null", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "- x: [", Value: "\"'\n\t&a *b",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: 9}}}},
	}
	var out [][]byte
	for _, c := range cfgs {
		b, _ := proto.Marshal(c)
		out = append(out, b)
	}
	return out
}

// FuzzBuildSet: any RateLimitConfig bytes give a set or an error, never a
// panic; the YAML the converter writes is always well-formed (pkg/policy
// never reports a syntax error on it), and a set built has the resource's
// domain under the resource's name.
func FuzzBuildSet(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &rlsconfv3.RateLimitConfig{}
		if proto.Unmarshal(data, cfg) != nil {
			return
		}
		set, err := BuildSet([]*rlsconfv3.RateLimitConfig{cfg}, nil)
		var perrs policy.Errors
		if errors.As(err, &perrs) {
			for _, pe := range perrs {
				if pe.Snippet != "" {
					t.Fatalf("the converter wrote YAML that does not parse: %v\nconfig: %v", pe, cfg)
				}
			}
		}
		if err != nil {
			return
		}
		if len(set.Domains) != 1 || set.Domains[0].Name != cfg.GetDomain() || set.Domains[0].File != ResourceFile(cfg.GetName()) {
			t.Fatalf("config %v gave domains %v", cfg, set.Domains)
		}
	})
}

// FuzzOverlay: any overlay file merged into a pushed resource gives a set
// or an error, never a panic.
func FuzzOverlay(f *testing.F) {
	f.Add([]byte("domain: edge\ndescriptors:\n  - key: remote_address\n    mode: leased\n    rate_limit: {algorithm: gcra, burst: 3}\n"))
	f.Add([]byte("domain: edge\nconcurrency:\n  - name: g\n    match: {path_prefix: /}\n"))
	f.Add([]byte("domain: edge\ndescriptors:\n  - key: nope\n"))
	f.Add([]byte("domain: edge\ndescriptors: &a [*a]\n"))
	f.Add([]byte("concurrency: []\n"))
	seed := fuzzSeeds()[0]
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := &rlsconfv3.RateLimitConfig{}
		if err := proto.Unmarshal(seed, cfg); err != nil {
			t.Fatal(err)
		}
		o := &Overlay{byDomain: map[string]overlayFile{}}
		if o.add("overlay.yaml", data) != nil {
			return
		}
		_, _ = BuildSet([]*rlsconfv3.RateLimitConfig{cfg}, o)
	})
}
