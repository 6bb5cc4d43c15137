package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestUpstreamRuntimeLayout (issue 32, item 4): envoyproxy/ratelimit loads
// every file under RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config — in
// subdirectories too, whatever the extension — and a trailing "---" is
// fine. Run as /bin/ratelimit with only upstream's variables, the binary
// loads the same tree and answers each file's domain as upstream would
// (5 per minute here: five OK, then OVER_LIMIT); a dot file is skipped.
// Before, config/team-a/api.yaml and config/mongo.conf were not loaded and
// the trailing "---" refused the whole set.
func TestUpstreamRuntimeLayout(t *testing.T) {
	root := t.TempDir()
	cfg := filepath.Join(root, "ratelimit", "config")
	policy := func(domain string) string {
		return "domain: " + domain + "\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"
	}
	for name, body := range map[string]string{
		"top.yaml":            policy("top"),
		"team-a/api.yaml":     policy("team_a"),
		"team-b/deep/api.yml": policy("team_b"),
		"mongo.conf":          policy("mongo"),
		"trailing.yaml":       policy("trailing") + "---\n",
		".swap.yaml":          "not: [a policy\n",
	} {
		p := filepath.Join(cfg, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := runAs(t, []string{"/bin/ratelimit"}, map[string]string{
		"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "USE_STATSD": "false",
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": loopbackPort(t), "HOST": "127.0.0.1", "PORT": loopbackPort(t),
	})
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, domain := range []string{"top", "team_a", "team_b", "mongo", "trailing"} {
		req := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
		var codes []string
		for range 6 {
			resp, err := client.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatalf("domain %s: %v", domain, err)
			}
			codes = append(codes, resp.GetOverallCode().String())
		}
		if want := "OK OK OK OK OK OVER_LIMIT"; strings.Join(codes, " ") != want {
			t.Errorf("domain %s: %v, want %s (its file loaded, 5 per minute)", domain, codes, want)
		}
	}
}
