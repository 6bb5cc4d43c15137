package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// debugPolicy uses the extensions whose Go form looked least like YAML:
// durations, a lease, several limits.
const debugPolicy = `domain: edge
descriptors:
  - key: remote_address
    mode: leased
    lease: {batch: 10, return_idle_after: 30s}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20}
  - key: user
    rate_limits:
      - {name: user-burst, unit: second, requests_per_unit: 10}
      - {name: user-daily, unit: day, requests_per_unit: 1000}
`

const debugGates = `concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    controller: aimd
    initial_limit: 4
    queue: {max: 2, timeout: 50ms}
`

// TestDebugPolicyShowsThePolicyAsWritten: /debug/policy is the policy in
// YAML keys and durations, each file a loadable document, each limit
// followed by what it compiled to and each gate by its state.
func TestDebugPolicyShowsThePolicyAsWritten(t *testing.T) {
	s := startInProcess(t, map[string]string{"edge.yaml": debugPolicy, "gates.yaml": debugGates})
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get("http://" + s.httpAddr + "/debug/policy")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "application/yaml") {
		t.Errorf("status %d, Content-Type %q; want 200 application/yaml", resp.StatusCode, ct)
	}
	for _, want := range []string{
		"lease: {batch: 10, return_idle_after: 30s}",
		"rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20} # rule remote_address: leased, gcra, batch 10, 2 keys",
		"- {name: user-burst, unit: second, requests_per_unit: 10} # rule user-burst: strict, fixed_window",
		"- name: checkout # aimd: limit 4, 0 in flight, 0 queued",
		"queue: {max: 2, timeout: 50ms}",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/debug/policy lacks %q:\n%s", want, text)
		}
	}
	for _, bad := range []string{"ReturnIdleAfter", "30000000000", "RequestsPerUnit"} {
		if strings.Contains(text, bad) {
			t.Errorf("/debug/policy shows %q (a Go name or nanoseconds):\n%s", bad, text)
		}
	}
	docs := strings.Split(text, "\n---\n")
	if len(docs) != 3 { // the header, then one document per file
		t.Fatalf("%d documents, want a header and 2 files:\n%s", len(docs), text)
	}
	for _, doc := range docs[1:] {
		if _, err := policy.Parse("debug.yaml", []byte(doc)); err != nil {
			t.Errorf("a document of /debug/policy does not load as a policy file: %v\n%s", err, doc)
		}
	}
}
