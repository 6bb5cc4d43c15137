package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttlekit/throttlekit/internal/certtest"
	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// rlqsPolicy has a limit RLQS serves (per minute) and one it refuses (per
// second).
const rlqsPolicy = `domain: t
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, unit: minute, requests_per_unit: 100}
  - key: k
    rate_limit: {name: per-second, unit: second, requests_per_unit: 5}
`

// quotaStream opens an RLQS stream to addr and subscribes tenant=a: the
// first action it gets back is returned, with the stream.
func quotaStream(t *testing.T, ctx context.Context, addr string, creds credentials.TransportCredentials) (grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], *rlqspb.RateLimitQuotaResponse_BucketAction) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "t", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqspb.BucketId{Bucket: map[string]string{"tenant": "a"}}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(0),
	}}}); err != nil {
		t.Fatal(err)
	}
	// A subscription in a window's last second or so cannot be assigned
	// that window: it is told DENY_ALL to the window's end (its first
	// request was allowed: Envoy's default), and assigned at the next.
	for {
		r, err := st.Recv()
		if err != nil {
			t.Fatalf("no answer to a subscription: %v", err)
		}
		a := r.GetBucketAction()[0]
		if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
			return st, a
		}
	}
}

// assigned checks a is a token bucket of 1..100 units living less than the
// minute window.
func assigned(t *testing.T, a *rlqspb.RateLimitQuotaResponse_BucketAction) int64 {
	t.Helper()
	qa := a.GetQuotaAssignmentAction()
	n := int64(qa.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens())
	if ttl := qa.GetAssignmentTimeToLive().AsDuration(); n < 1 || n > 100 || ttl < time.Second || ttl >= time.Minute {
		t.Fatalf("assignment %v: want a token bucket of 1..100 living under a minute", a)
	}
	return n
}

// TestServeRLQS: serve --rlqs answers a subscription with an assignment on
// the gRPC listener, counts it in the throttlekit_rlqs_* series, logs the
// rule it refuses by name, and on shutdown ends the open stream with
// UNAVAILABLE at once rather than waiting the drain timeout for it.
func TestServeRLQS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(rlqsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	args := []string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--drain-timeout", "30s", "--rlqs"}
	go func() { exit <- run(ctx, args, env(nil), io.Discard, stderr) }()
	defer func() {
		cancel()
		select {
		case <-exit:
		case <-time.After(exitDeadline):
			t.Error("serve did not return")
		}
	}()
	s := &sidecar{stderr: stderr}
	if !testenv.Eventually(func() bool { s.grpcAddr, s.httpAddr = servingAddrs(stderr.String()); return s.grpcAddr != "" }) {
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	st, a := quotaStream(t, context.Background(), s.grpcAddr, insecure.NewCredentials())
	n := assigned(t, a)
	var series int
	for _, m := range s.scrape(t) {
		if m.name == "throttlekit_rlqs_assignments_total" && m.labels["domain"] == "t" && m.labels["rule"] == "per-tenant" && m.value == 1 {
			series++
		}
		if m.name == "throttlekit_rlqs_assigned_units_total" && m.labels["rule"] == "per-tenant" && int64(m.value) == n {
			series++
		}
		if m.name == "throttlekit_rlqs_streams_open" && m.value == 1 {
			series++
		}
	}
	if series != 3 {
		t.Errorf("/metrics: want the assignment (%d units) and the open stream counted", n)
	}
	if log := stderr.String(); !strings.Contains(log, "t/per-second") || !strings.Contains(log, "DENY_ALL") {
		t.Errorf("the refused rule t/per-second is not logged:\n%s", log)
	}
	start := time.Now()
	cancel()
	_, err := st.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("stream ended with %v, want UNAVAILABLE saying the sidecar is shutting down", err)
	}
	select {
	case <-exit:
	case <-time.After(exitDeadline):
		t.Fatal("serve did not return")
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("shutdown took %v with an RLQS stream open: the stream was waited for (--drain-timeout 30s)", took)
	}
	exit <- 0 // for the deferred check
}

// TestServeRLQSOverMutualTLS: the quota service is on the TLS listener as
// RLS is.
func TestServeRLQSOverMutualTLS(t *testing.T) {
	ca := certtest.NewCA(t, "rlqs-ca")
	srv := ca.Issue(t, true, []string{"throttlekit.internal"}, "")
	cli := ca.Issue(t, false, []string{"envoy"}, "")
	dir := t.TempDir()
	for name, b := range map[string][]byte{"srv.crt": srv.CertPEM, "srv.key": srv.KeyPEM, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	s := startServeWith(t, rlqsPolicy, []string{"--rlqs", "--grpc-tls-cert", p("srv.crt"), "--grpc-tls-key", p("srv.key"), "--grpc-tls-client-ca", p("ca.crt")}, nil)
	creds := credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "throttlekit.internal", Certificates: []tls.Certificate{cli.Pair(t)}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, a := quotaStream(t, ctx, s.grpcAddr, creds)
	assigned(t, a)
}

// TestRLQSFlags: the guard, the idle abandon and the store timeout are
// checked, saying what to write.
func TestRLQSFlags(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--rlqs-guard", "0s"}, "--rlqs-guard 0s: want more than 0 and at most 1s"},
		{[]string{"--rlqs-guard", "2s"}, "--rlqs-guard 2s"},
		{[]string{"--rlqs-abandon-idle", "10s"}, "--rlqs-abandon-idle 10s: at least 1m"},
		{[]string{"--rlqs-abandon-idle", "-1m"}, "must be ≥ 0"},
		{[]string{"--rlqs-store-timeout", "5ms"}, "--rlqs-store-timeout 5ms: want 10ms to 1m"},
		{[]string{"--rlqs-store-timeout", "2m"}, "--rlqs-store-timeout 2m0s: want 10ms to 1m"},
	} {
		_, err := parseServe(append([]string{"--rlqs"}, tc.flags...), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.flags, err, tc.want)
		}
	}
	if _, err := parseServe([]string{"--rlqs", "--rlqs-guard", "500ms", "--rlqs-abandon-idle", "0", "--rlqs-store-timeout", "2s"}, env(nil), io.Discard); err != nil {
		t.Errorf("valid flags refused: %v", err)
	}
}

// TestValidateListsRLQSRefusals: validate --rlqs names each rule the quota
// service would answer DENY_ALL for, once prefixed (not "rlqs: rlqs:"),
// and exits 1: an Envoy's rate_limit_quota filter would deny every request
// of their buckets (it exited 0). Without --rlqs it says nothing of RLQS
// and exits 0 (RLS serves the rule).
func TestValidateListsRLQSRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(rlqsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, rlqs := range []bool{true, false} {
		args := []string{"validate", dir}
		if rlqs {
			args = []string{"validate", "--rlqs", dir}
		}
		var out, errs bytes.Buffer
		code := run(context.Background(), args, env(nil), &out, &errs)
		if want := map[bool]int{true: 1, false: 0}[rlqs]; code != want || !strings.Contains(out.String(), dir+": OK") {
			t.Fatalf("%v: exit %d, want %d: %s%s", args, code, want, out.String(), errs.String())
		}
		if strings.Contains(out.String(), "rlqs: rlqs:") {
			t.Errorf("%v: the prefix doubled:\n%s", args, out.String())
		}
		if rlqs && !strings.Contains(errs.String(), "1 rule the quota service (--rlqs) would answer DENY_ALL for") {
			t.Errorf("%v: stderr %q, want it to say why it fails", args, errs.String())
		}
		named := strings.Contains(out.String(), dir+": rlqs: ") && strings.Contains(out.String(), "t/per-second") && strings.Contains(out.String(), "at least 2s")
		if named != rlqs || strings.Contains(out.String(), "per-tenant") {
			t.Errorf("%v:\n%s\nwant t/per-second named only with --rlqs, per-tenant never", args, out.String())
		}
	}
}

// TestRLQSMember: the ledger name is the node id and the gRPC address,
// two sidecars on one host apart, and never longer than the ledger takes.
func TestRLQSMember(t *testing.T) {
	if a, b := rlqsMember("pod-1", "127.0.0.1:8081"), rlqsMember("pod-1", "127.0.0.1:8082"); a == b || a != "pod-1@127.0.0.1:8081" {
		t.Errorf("members %q and %q", a, b)
	}
	long := rlqsMember(strings.Repeat("n", 63), "[::1]:8081")
	if len(long) > gale.MaxMember || long != rlqsMember(strings.Repeat("n", 63), "[::1]:8081") {
		t.Errorf("a long name: %q (%d bytes), or not the same twice", long, len(long))
	}
}
