package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

func TestFederationFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--region", "eu"}, "--region needs --federation-url"},
		{[]string{"--federation-url", "redis://127.0.0.1:1/0"}, "--federation-url needs --region"},
		{[]string{"--region", "eu", "--federation-url", "mysql://root:hunter2@db/x"}, `--federation-url mysql://root:xxxxx@db/x: scheme "mysql": want redis://, rediss://, redis+cluster:// or postgres://`},
		{[]string{"--region", "e/u", "--federation-url", "redis://127.0.0.1:1/0"}, `--region "e/u": at most 64 bytes, without / or NUL`},
		{[]string{"--region", "eu", "--federation-url", "redis://127.0.0.1:1/0", "--federation-timeout", "0s"}, "--federation-timeout and --federation-probe-after must be positive"},
	}
	for _, tc := range cases {
		_, err := parseServe(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: the error shows the password: %v", tc.args, err)
		}
	}
	if _, err := parseServe([]string{"--region", "eu", "--federation-url", "postgres://u@127.0.0.1:1/db"}, env(nil), io.Discard); err != nil {
		t.Errorf("a valid federation: %v", err)
	}
}

// TestFederationRegionalOnlyNeedsRedis: with --store memory a process has
// no regional store, and a regional_only rule is refused at load, saying
// why; fail_closed is accepted.
func TestFederationRegionalOnlyNeedsRedis(t *testing.T) {
	l3 := testenv.StartRedis(t)
	c, err := parseServe([]string{"--region", "eu", "--federation-url", l3.URL()}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFederation(context.Background(), c, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: 1e9}
	_, err = f.rule(engine.FederatedRule{Rule: rule, Federation: policy.Federation{Outage: policy.RegionalOnly, RegionalLimit: 3}})
	if err == nil || !strings.Contains(err.Error(), "regional_only needs the region's own Redis") {
		t.Fatalf("regional_only with --store memory: %v", err)
	}
	fed, err := f.rule(engine.FederatedRule{Ref: engine.RuleRef{Domain: "d", Name: "n"}, Rule: rule, Federation: policy.Federation{Outage: policy.FailClosed}})
	if err != nil || fed.Store == nil || fed.Batch != 1 {
		t.Fatalf("fail_closed: %+v, %v; want a region with the default batch (a tenth of 10)", fed, err)
	}
}

// TestFederationSaysWhatTheCoordinatorDoes (issue 32, item 6): a
// coordinator Redis without appendonly is warned about at start; an outage
// and the recovery are each logged once (before, only a gauge moved).
func TestFederationSaysWhatTheCoordinatorDoes(t *testing.T) {
	l3 := testenv.StartRedis(t) // appendonly no
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fed.yaml"), []byte("domain: fed\ndescriptors:\n  - key: k\n    mode: federated\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := runServe(t, []string{"serve", "--policy", dir, "--region", "eu", "--federation-url", l3.URL(),
		"--federation-timeout", "200ms", "--federation-probe-after", "10ms", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, env(nil))
	if got := strings.Count(s.stderr.String(), "runs without appendonly"); got != 1 {
		t.Fatalf("%d warnings about the coordinator's appendonly, want 1:\n%s", got, s.stderr.String())
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "fed", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: fmt.Sprint(time.Now().UnixNano())}}}}})
	}
	l3.Kill()
	if !testenv.Eventually(func() bool { ask(); return strings.Contains(s.stderr.String(), "the coordinator does not answer") }) {
		t.Fatalf("no outage logged:\n%s", s.stderr.String())
	}
	l3.Restart()
	if !testenv.Eventually(func() bool { ask(); return strings.Contains(s.stderr.String(), "the coordinator answers again") }) {
		t.Fatalf("no recovery logged:\n%s", s.stderr.String())
	}
	if n := strings.Count(s.stderr.String(), "the coordinator does not answer:"); n != 1 {
		t.Errorf("the outage logged %d times, want once", n)
	}
}
