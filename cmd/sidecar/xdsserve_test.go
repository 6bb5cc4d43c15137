package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/internal/xdstest"
)

// xdsLimit is a pushed domain "edge" with n requests a minute per value of
// key.
func xdsLimit(key string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "edge-limits", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}}}}
}

// rlsCode asks the sidecar about one request of domain edge.
func rlsCode(t *testing.T, s *sidecar, key, value string) rlsv3.RateLimitResponse_Code {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetOverallCode()
}

func (s *sidecar) waitReady(t *testing.T, want int) {
	t.Helper()
	if !testenv.Eventually(func() bool { code, _ := s.get(t, "/readyz"); return code == want }) {
		code, body := s.get(t, "/readyz")
		t.Fatalf("/readyz %d %q, want %d", code, body, want)
	}
}

// TestServeTakesPolicyOverXDS: with --config-xds-url, serve is not ready
// until the first push, then answers it, follows an update, keeps the last
// good policy on a bad push (NACKed, counted as a failed reload) and takes
// the next good one.
func TestServeTakesPolicyOverXDS(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	s := startServe(t, []string{"--config-xds-url", srv.Addr, "--config-xds-node-id", "rl", "--config-xds-retry-interval", "50ms"}, nil)
	if code, body := s.get(t, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "no policy") {
		t.Fatalf("before the first push /readyz = %d %q, want 503", code, body)
	}

	srv.Push("rl", "v1", xdsLimit("k", 2))
	s.waitReady(t, http.StatusOK)
	// /debug/policy says where the policy came from (it showed an empty
	// source), and the stream's log line names the xDS node apart from the
	// sidecar's own (it had two "node" keys).
	if _, body := s.get(t, "/debug/policy"); !strings.Contains(body, "# the policy in use: pushed over xDS") {
		t.Errorf("/debug/policy under xDS:\n%s\nwant it to say the policy was pushed over xDS", body)
	}
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(line, "xDS stream open") && (strings.Count(line, `"node":`) != 1 || !strings.Contains(line, `"xds_node":"rl"`)) {
			t.Errorf("the stream's log line: %s\nwant one node key and xds_node rl", line)
		}
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := rlsCode(t, s, "k", "a"); got != want {
			t.Fatalf("v1, request %d: %v, want %v", i+1, got, want)
		}
	}

	srv.Push("rl", "v2", xdsLimit("user", 1))
	if !testenv.Eventually(func() bool { return srv.Acked("v2") }) {
		t.Fatal("v2 not ACKed")
	}
	if got := rlsCode(t, s, "user", "u"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("v2 first request: %v", got)
	}
	if got := rlsCode(t, s, "user", "u"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("v2 second request: %v, want OVER_LIMIT (the update was not applied)", got)
	}

	bad := xdsLimit("k", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Push("rl", "v3", bad)
	if !testenv.Eventually(func() bool { return len(srv.Nacks()) > 0 }) {
		t.Fatal("the bad push was not NACKed")
	}
	if !testenv.Eventually(func() bool { return s.counter(t, "throttlekit_policy_reloads_total", "result", "failure") >= 1 }) {
		t.Error("the NACK was not counted as a failed reload")
	}
	if got := rlsCode(t, s, "user", "u"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the bad push: %v, want v2's OVER_LIMIT (the last good policy)", got)
	}
	if code, _ := s.get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("a bad push made /readyz %d", code)
	}
}

// TestServeXDSFromUpstreamEnvironment: envoyproxy/ratelimit's variables
// alone configure the subscription; FORCE_START_WITHOUT_INITIAL_CONFIG
// makes serve ready before the first push.
func TestServeXDSFromUpstreamEnvironment(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	env := map[string]string{
		"CONFIG_TYPE":                        "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL":         srv.Addr,
		"CONFIG_GRPC_XDS_NODE_ID":            "envoy-gateway-ratelimit",
		"CONFIG_GRPC_XDS_NODE_METADATA":      "cluster=rl",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true",
	}
	s := startServe(t, nil, env)
	s.waitReady(t, http.StatusOK) // forced: ready with no push yet
	if got := rlsCode(t, s, "k", "a"); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("before any push: %v, want OK", got)
	}
	srv.Push("envoy-gateway-ratelimit", "v1", xdsLimit("k", 1))
	if !testenv.Eventually(func() bool { return srv.Acked("v1") }) {
		t.Fatal("v1 not ACKed: the node id did not come from CONFIG_GRPC_XDS_NODE_ID")
	}
	if got := rlsCode(t, s, "k", "b"); got != rlsv3.RateLimitResponse_OK {
		t.Fatal(got)
	}
	if got := rlsCode(t, s, "k", "b"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second request after v1: %v, want OVER_LIMIT", got)
	}
	if md := srv.Requests()[0].GetNode().GetMetadata().GetFields(); md["cluster"].GetStringValue() != "rl" {
		t.Errorf("node metadata %v", md)
	}
	if log := s.stderr.String(); !strings.Contains(log, "CONFIG_GRPC_XDS_SERVER_URL") {
		t.Errorf("the start log does not say CONFIG_GRPC_XDS_SERVER_URL was taken")
	}
	// The serving line says where the policy comes from: xDS, not the
	// --policy directory it never reads (issue 32, item 11).
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if strings.Contains(line, `"msg":"serving"`) && !strings.Contains(line, `"policy":"xds `+srv.Addr+`"`) {
			t.Errorf("the serving line %s, want policy=xds %s", line, srv.Addr)
		}
	}
}

// counter is the value of name's series with label=value, or -1.
func (s *sidecar) counter(t *testing.T, name, label, value string) float64 {
	t.Helper()
	for _, m := range s.scrape(t) {
		if m.name == name && m.labels[label] == value {
			return m.value
		}
	}
	return -1
}

// TestXDSFlagsSayWhatIsWrong: each misuse of the --config-xds-* flags is
// refused with the flag to fix.
func TestXDSFlagsSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config-xds-url", "grpc://cp:18000"}, "want host:port"},
		{[]string{"--config-xds-url", "cp:18000", "--config-xds-tls-ca", "/ca.pem"}, "need --config-xds-tls"},
		{[]string{"--config-xds-url", "cp:18000", "--config-xds-tls", "--config-xds-tls-cert", "/c.pem"}, "--config-xds-tls-cert and --config-xds-tls-key go together"},
		{[]string{"--config-xds-url", "cp:18000", "--config-xds-node-metadata", "zone"}, `--config-xds-node-metadata: pair 1 is not key=value`},
		{[]string{"--config-xds-url", "cp:18000", "--config-xds-headers", "a=b"}, `--config-xds-headers: pair 1 is not key:value`},
		// A malformed header may be a token: the error never shows it.
		{[]string{"--config-xds-url", "cp:18000", "--config-xds-headers", "x-tenant:a, Bearer s3cr3t-token"}, `--config-xds-headers: pair 2 is not key:value (its text is not shown: it may hold a secret)`},
		{[]string{"--config-xds-url", "cp:18000", "--config-xds-retry-interval", "0s"}, "must be positive"},
		{[]string{"--force-start-without-policy"}, "--force-start-without-policy needs --config-xds-url"},
		{[]string{"--config-xds-overlay", "/o"}, "--config-xds-overlay needs --config-xds-url"},
	} {
		_, err := parseServe(tc.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%v: the error shows the token: %v", tc.args, err)
		}
	}
	c, err := parseServe([]string{"--config-xds-url", "cp:18000", "--config-xds-node-metadata", "a=1, b=2", "--config-xds-headers", "x-token:t"}, func(string) string { return "" }, io.Discard)
	if err != nil || !c.xds.enabled() {
		t.Fatalf("a good set of flags: %v", err)
	}
}
