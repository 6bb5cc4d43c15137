package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// testInvalidRequests checks that malformed requests get INVALID_ARGUMENT,
// are counted as such, and leave the server answering.
func testInvalidRequests(t *testing.T, s *sidecar) {
	v := unique(t, "v")
	many := make([]*ratelimitv3.RateLimitDescriptor, 5000)
	for i := range many {
		many[i] = desc("account", fmt.Sprint(v, i))
	}
	cases := []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"no domain", request("", desc("account", v))},
		{"no descriptors", request("e2e")},
		{"an empty key", request("e2e", desc("", v))},
		{"a descriptor without entries", request("e2e", desc())},
		{"5000 descriptors", request("e2e", many...)},
	}
	before := s.metrics(t)
	for _, c := range cases {
		resp, err := s.call(c.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, error %v; want code InvalidArgument", c.name, resp, err)
		}
	}
	after := s.metrics(t)
	if got := after.get("throttlekit_grpc_requests_total", "method", "ShouldRateLimit", "code", "InvalidArgument") -
		before.get("throttlekit_grpc_requests_total", "method", "ShouldRateLimit", "code", "InvalidArgument"); got != float64(len(cases)) {
		t.Errorf(`throttlekit_grpc_requests_total{code="InvalidArgument"} grew by %v, want %d`, got, len(cases))
	}
	runSteps(t, s, []step{
		{"a valid request after the invalid ones", request("e2e", desc("account", v)), ok, []string{"OK [account_daily 5/DAY] remaining=4"}},
	})
	if code, body, err := s.get("/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("GET /healthz after invalid requests: %d %q %v", code, body, err)
	}
}

// testMetrics checks that /metrics follows the requests: a rule's verdicts,
// the gRPC calls, the store calls, and the policy gauges.
func testMetrics(t *testing.T, s *sidecar) {
	v := unique(t, "v")
	before := s.metrics(t)
	runSteps(t, s, []step{
		{"1st", request("e2e", desc("counted", v)), ok, []string{"OK [counted_rule 2/DAY] remaining=1"}},
		{"2nd: near the limit", request("e2e", desc("counted", v)), ok, []string{"OK [counted_rule 2/DAY] remaining=0"}},
		{"3rd: over", request("e2e", desc("counted", v)), over, []string{"OVER_LIMIT [counted_rule 2/DAY] remaining=0"}},
	})
	after := s.metrics(t)
	wantGrowth(t, "decisions of counted_rule", before.decisions("e2e", "counted_rule"), after.decisions("e2e", "counted_rule"),
		map[string]float64{"ok": 2, "near_limit": 1, "over_limit": 1})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"throttlekit_grpc_requests_total", []string{"method", "ShouldRateLimit", "code", "OK"}, 3},
		{"throttlekit_grpc_requests_total", []string{"method", "ShouldRateLimit", "code", "InvalidArgument"}, 0},
		// Strict mode: every check is one store call, the denial included.
		{"throttlekit_store_calls_total", []string{"op", "check"}, 3},
		{"throttlekit_store_errors_total", nil, 0},
	} {
		if got := after.get(c.name, c.labels...) - before.get(c.name, c.labels...); got != c.want {
			t.Errorf("%s%q grew by %v over 3 calls, want %v", c.name, c.labels, got, c.want)
		}
	}
	if hashes := after.labelValues("throttlekit_policy_info", "hash"); len(hashes) != 1 || hashes[0] == "" ||
		after.get("throttlekit_policy_info") != 1 {
		t.Errorf("throttlekit_policy_info: hashes %q, value %v; want one series, valued 1, with a hash", hashes, after.get("throttlekit_policy_info"))
	}
	if got := after.get("throttlekit_policy_reloads_total", "result", "success"); got < 1 {
		t.Errorf(`throttlekit_policy_reloads_total{result="success"} = %v after the first load, want ≥ 1`, got)
	}
	if got := after.get("throttlekit_store_up"); got != 1 {
		t.Errorf("throttlekit_store_up = %v with the store reachable, want 1", got)
	}
}

// testGRPCHealth checks grpc.health.v1: the server and the
// RateLimitService both report SERVING.
func testGRPCHealth(t *testing.T, s *sidecar) {
	health := healthpb.NewHealthClient(s.conn)
	for _, service := range []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName} {
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		cancel()
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, error %v; want SERVING", service, resp.GetStatus(), err)
		}
	}
}

// testJSONEndpoint checks POST /json: the RateLimitResponse as JSON, 200
// when OK, 429 when over the limit, 400 for a request that is not one.
func testJSONEndpoint(t *testing.T, s *sidecar) {
	body := fmt.Sprintf(`{"domain": "e2e", "descriptors": [{"entries": [{"key": "json", "value": %q}]}]}`, unique(t, "v"))
	for i, want := range []struct {
		code    int
		overall rlsv3.RateLimitResponse_Code
		status  string
	}{
		{http.StatusOK, ok, "OK [1/DAY] remaining=0"},
		{http.StatusTooManyRequests, over, "OVER_LIMIT [1/DAY] remaining=0"},
	} {
		code, out := s.post(t, "/json", body)
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(out), &resp); err != nil {
			t.Errorf("call %d: status %d, body %q is not a RateLimitResponse: %v", i+1, code, out, err)
			continue
		}
		if code != want.code || resp.GetOverallCode() != want.overall || len(resp.GetStatuses()) != 1 || statusLine(resp.GetStatuses()[0]) != want.status {
			t.Errorf("call %d: status %d, body %s; want %d, overall %v, %s", i+1, code, out, want.code, want.overall, want.status)
		}
	}
	for _, bad := range []string{`{"domain": `, `{"descriptors": [{"entries": [{"key": "json", "value": "x"}]}]}`} {
		if code, out := s.post(t, "/json", bad); code != http.StatusBadRequest {
			t.Errorf("POST /json %s: status %d (%q), want 400", bad, code, out)
		}
	}
}
