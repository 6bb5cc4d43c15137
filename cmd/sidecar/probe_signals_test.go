package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/certtest"
	"github.com/throttlekit/throttlekit/internal/testenv"
)

// TestProbeSaysTheStoreFailed (issue 32, item 7): a sidecar whose Redis is
// gone answers UNAVAILABLE itself. probe used to say it could not reach
// throttlekit; it now says throttlekit answered and its store failed.
func TestProbeSaysTheStoreFailed(t *testing.T) {
	r := testenv.StartRedis(t)
	s := startInProcess(t, map[string]string{"edge.yaml": probePolicy}, "--store", "redis", "--redis-url", r.URL(), "--store-timeout", "200ms")
	ctx := context.Background()
	if code, out, errs := runProbe(ctx, "--addr", s.grpcAddr, "--domain", "edge", "--descriptor", "path=/x"); code != 0 {
		t.Fatalf("with Redis up: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	r.Kill()
	code, _, errs := runProbe(ctx, "--addr", s.grpcAddr, "--domain", "edge", "--descriptor", "path=/x")
	if code != 1 || !strings.Contains(errs, "throttlekit at "+s.grpcAddr+" answered, but could not decide: its store failed") || strings.Contains(errs, "cannot reach") {
		t.Fatalf("with Redis gone: exit %d, stderr %q; want exit 1 and that throttlekit answered and its store failed", code, errs)
	}
}

// TestProbeOverMutualTLS (issue 32, item 7): probe dials a gRPC listener
// that requires a client certificate (as Envoy Gateway's is) with
// --tls-ca, --tls-cert and --tls-key; without them it says the listener
// may be TLS and which flags to give.
func TestProbeOverMutualTLS(t *testing.T) {
	ca := certtest.NewCA(t, "probe-ca")
	srv := ca.Issue(t, true, []string{"throttlekit.internal"}, "")
	cli := ca.Issue(t, false, []string{"envoy"}, "")
	dir := t.TempDir()
	files := map[string][]byte{"srv.crt": srv.CertPEM, "srv.key": srv.KeyPEM, "cli.crt": cli.CertPEM, "cli.key": cli.KeyPEM, "ca.crt": ca.PEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	s := startInProcess(t, map[string]string{"edge.yaml": probePolicy},
		"--grpc-tls-cert", p("srv.crt"), "--grpc-tls-key", p("srv.key"), "--grpc-tls-client-ca", p("ca.crt"), "--grpc-tls-client-san", "envoy")
	ctx := context.Background()
	base := []string{"--addr", s.grpcAddr, "--metrics-url", "", "--domain", "edge", "--descriptor", "path=/x"}

	code, out, errs := runProbe(ctx, append(base, "--tls-ca", p("ca.crt"), "--tls-cert", p("cli.crt"), "--tls-key", p("cli.key"), "--tls-server-name", "throttlekit.internal")...)
	if code != 0 || !strings.HasPrefix(out, "OK: descriptor path=/x, limit 5 per minute, remaining 4") {
		t.Fatalf("over mutual TLS: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, _, errs = runProbe(ctx, base...)
	if code != 1 || !strings.Contains(errs, "is its gRPC listener TLS") || !strings.Contains(errs, "--tls-ca") {
		t.Errorf("plaintext to a TLS listener: exit %d, stderr %q; want a hint to give --tls-ca", code, errs)
	}
	// TLS without a client certificate, or with another CA: probe says
	// which flag fixes it (it said "is `throttlekit serve` running
	// there?", issue 42, item 6).
	code, _, errs = runProbe(ctx, append(base, "--tls-ca", p("ca.crt"), "--tls-server-name", "throttlekit.internal")...)
	if code != 1 || strings.Contains(errs, "is its gRPC listener TLS") || strings.Contains(errs, "running there") || !strings.Contains(errs, "--tls-cert and --tls-key") {
		t.Errorf("TLS without a client certificate: exit %d, stderr %q; want exit 1 and to give --tls-cert and --tls-key", code, errs)
	}
	other := certtest.NewCA(t, "other-ca")
	if err := os.WriteFile(p("other.crt"), other.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runProbe(ctx, append(base, "--tls-ca", p("other.crt"), "--tls-cert", p("cli.crt"), "--tls-key", p("cli.key"), "--tls-server-name", "throttlekit.internal")...)
	if code != 1 || strings.Contains(errs, "running there") || !strings.Contains(errs, "--tls-ca") {
		t.Errorf("TLS with another CA: exit %d, stderr %q; want exit 1 naming --tls-ca", code, errs)
	}
	code, _, errs = runProbe(ctx, append(base, "--tls-ca", p("ca.crt"), "--tls-cert", p("cli.crt"), "--tls-key", p("cli.key"), "--tls-server-name", "elsewhere.internal")...)
	if code != 1 || strings.Contains(errs, "running there") || !strings.Contains(errs, "--tls-server-name") {
		t.Errorf("TLS checking a name the certificate does not carry: exit %d, stderr %q; want exit 1 naming --tls-server-name", code, errs)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", p("cli.crt")}, "--tls-cert needs --tls-key"},
		{[]string{"--tls-key", p("cli.key")}, "--tls-key needs --tls-cert"},
		{[]string{"--tls-ca", p("cli.key")}, "--tls-ca " + p("cli.key") + ": no PEM certificate in it"},
		{[]string{"--metrics-url", "127.0.0.1:8080"}, "--metrics-url \"127.0.0.1:8080\": want http://"},
	} {
		code, _, errs := runProbe(ctx, append([]string{"--domain", "edge", "--descriptor", "a=1"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestProbeSaysUnknownDomainAndShadow (issue 32, item 7): an unknown
// domain and a shadow rule over its limit are both answered OK; probe
// reads the sidecar's /metrics before and after and says which it was.
func TestProbeSaysUnknownDomainAndShadow(t *testing.T) {
	const shadow = "domain: edge\ndescriptors:\n  - key: path\n    value: /s\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
	s := startInProcess(t, map[string]string{"edge.yaml": shadow})
	ctx := context.Background()
	metrics := "http://" + s.httpAddr + "/metrics"
	probe := func(args ...string) (int, string) {
		t.Helper()
		code, out, errs := runProbe(ctx, append([]string{"--addr", s.grpcAddr, "--metrics-url", metrics}, args...)...)
		if errs != "" {
			t.Errorf("probe %v: stderr %q", args, errs)
		}
		return code, out
	}
	if code, out := probe("--domain", "edge", "--descriptor", "path=/s"); code != 0 || strings.Contains(out, "note:") {
		t.Errorf("the first of 1: exit %d, stdout %q; want no note", code, out)
	}
	code, out := probe("--domain", "edge", "--descriptor", "path=/s")
	if code != 0 || !strings.Contains(out, "note: shadow rule ") || !strings.Contains(out, "of domain edge went over its limit during the probe") {
		t.Errorf("the second of 1, shadow: exit %d, stdout %q; want a note that the shadow rule is over its limit", code, out)
	}
	code, out = probe("--domain", "edgee", "--descriptor", "path=/s")
	if code != 0 || !strings.Contains(out, `note: domain "edgee" is unknown to throttlekit`) {
		t.Errorf("an unknown domain: exit %d, stdout %q; want a note that it is unknown", code, out)
	}
	if code, out := probe("--domain", "edge", "--descriptor", "user=x"); code != 0 || strings.Contains(out, "note:") {
		t.Errorf("no rule in a known domain: exit %d, stdout %q; want no note", code, out)
	}
	code, _, errs := runProbe(ctx, "--addr", s.grpcAddr, "--metrics-url", "http://"+s.grpcAddr+"/nothing", "--domain", "edgee", "--descriptor", "path=/s")
	if code != 0 || !strings.Contains(errs, "could not read --metrics-url") {
		t.Errorf("metrics unreadable, an answer it could explain: exit %d, stderr %q", code, errs)
	}
}
