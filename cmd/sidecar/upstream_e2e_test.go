package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/throttlekit/throttlekit/internal/certtest"
	"github.com/throttlekit/throttlekit/internal/testenv"
)

// loopbackPort is a free loopback port (another process could take it
// before serve binds it; the kernel hands out ports in turn, so it rarely
// does).
func loopbackPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// dialRLSOverTLS is a RateLimitService client of addr over TLS as cfg
// says; Cleanup closes it.
func dialRLSOverTLS(t *testing.T, addr string, cfg *tls.Config) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// runtimeRoot lays policy out as upstream reads its files, in
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/name with RUNTIME_SUBDIRECTORY
// ratelimit (Envoy Gateway's), and returns RUNTIME_ROOT.
func runtimeRoot(t *testing.T, name, policy string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// runAs runs the binary's entry point as argv under the environment e
// alone, until it logs "serving"; Cleanup stops it.
func runAs(t *testing.T, argv []string, e map[string]string) *sidecar {
	t.Helper()
	s := runServe(t, commandLine(argv), env(memoryStore(e)))
	if s.grpcAddr == "" {
		t.Fatalf("serve returned %d before serving", s.code)
	}
	return s
}

// TestServeWithOnlyTheUpstreamEnvironment runs the binary as
// /bin/ratelimit with nothing but envoyproxy/ratelimit's variables: policy
// in the RUNTIME_ROOT layout, counters in a real Redis, gRPC over mutual
// TLS. It must answer ShouldRateLimit from that policy and that Redis, only
// to a client with the right certificate, answer /healthcheck as upstream
// does, and say in one log line what it took and ignored.
func TestServeWithOnlyTheUpstreamEnvironment(t *testing.T) {
	r := testenv.StartRedis(t)
	// A day's limit, not testPolicy's second: six requests on a loaded
	// machine may span two seconds, and the sixth then opens a new window
	// (OK, not OVER_LIMIT) with no fault in what the test judges.
	root := runtimeRoot(t, "t.yaml", "domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	ca := certtest.NewCA(t, "eg-ca")
	srv := ca.Issue(t, true, []string{"envoy-ratelimit.envoy-gateway-system.svc"}, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": srv.CertPEM, "tls.key": srv.KeyPEM, "ca.crt": ca.PEM})
	grpcPort, httpPort := loopbackPort(t), loopbackPort(t)
	s := runAs(t, []string{"/bin/ratelimit"}, map[string]string{
		// The one variable that is not upstream's: no upstream variable
		// sets the store timeout (internal/upstreamenv), serve's 50ms
		// default is missed on a loaded machine (UNAVAILABLE, "store
		// failed: context deadline exceeded"), and a retry is no cure: a
		// check that timed out may have counted in Redis all the same.
		// Its twin is how an operator of the image raises it, too.
		"THROTTLEKIT_STORE_TIMEOUT": testenv.StoreDeadline.String(),
		"RUNTIME_ROOT":              root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "LOG_FORMAT": "json", "USE_STATSD": "false",
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": r.Addr,
		"GRPC_HOST": "127.0.0.1", "GRPC_PORT": grpcPort, "HOST": "127.0.0.1", "PORT": httpPort,
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": sec.Path("tls.crt"), "GRPC_SERVER_TLS_KEY": sec.Path("tls.key"),
		"GRPC_CLIENT_TLS_CACERT": sec.Path("ca.crt"), "GRPC_CLIENT_TLS_SAN": "envoy",
	})
	if s.grpcAddr != "127.0.0.1:"+grpcPort || s.httpAddr != "127.0.0.1:"+httpPort {
		t.Fatalf("serving on %s and %s, want GRPC_PORT %s and PORT %s", s.grpcAddr, s.httpAddr, grpcPort, httpPort)
	}

	// ShouldRateLimit, over mutual TLS: 5 a day, then OVER_LIMIT.
	dial := func(cert *tls.Certificate) rlsv3.RateLimitServiceClient {
		cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return dialRLSOverTLS(t, s.grpcAddr, cfg)
	}
	req := &rlsv3.RateLimitRequest{Domain: "t", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dial(nil).ShouldRateLimit(ctx, req); err == nil {
		t.Error("a client without a certificate was answered")
	}
	envoy := ca.Issue(t, false, []string{"envoy"}, "").Pair(t)
	client := dial(&envoy)
	var codes []string
	for range 6 {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.GetOverallCode().String())
	}
	if want := "OK OK OK OK OK OVER_LIMIT"; strings.Join(codes, " ") != want {
		t.Errorf("answers %v, want %s", codes, want)
	}
	if n, err := r.Client().DBSize(ctx).Result(); err != nil || n == 0 {
		t.Errorf("no counter in REDIS_URL's Redis (%d keys, %v): the store is not the one asked for", n, err)
	}

	// /healthcheck on PORT, as upstream answers it.
	code, body := s.get(t, "/healthcheck")
	if code != http.StatusOK || body != "OK" {
		t.Errorf("GET /healthcheck: %d %q, want 200 \"OK\"", code, body)
	}

	// One line says what was taken, ignored and defaulted.
	var lines []map[string]any
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "envoyproxy/ratelimit environment" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d lines about the upstream environment, want 1", len(lines))
	}
	took, _ := lines[0]["took"].(string)
	ignored, _ := lines[0]["ignored"].(string)
	for _, v := range []string{"RUNTIME_ROOT", "REDIS_URL", "GRPC_PORT", "PORT", "GRPC_CLIENT_TLS_SAN"} {
		if !strings.Contains(took, v) {
			t.Errorf("took = %q, want %s in it", took, v)
		}
	}
	for _, v := range []string{"USE_STATSD", "RUNTIME_WATCH_ROOT", "RUNTIME_IGNOREDOTFILES"} {
		if !strings.Contains(ignored, v+" (") {
			t.Errorf("ignored = %q, want %s with why", ignored, v)
		}
	}
}

// TestHealthcheckAnswersAsUpstream: 200 "OK" when healthy; 500 with no
// body while shutting down, before a policy when one is required, and
// while the store is down when it is required. A store outage alone does
// not fail it.
func TestHealthcheckAnswersAsUpstream(t *testing.T) {
	storeDown := func(context.Context) error { return io.ErrUnexpectedEOF }
	for _, tc := range []struct {
		name     string
		c        serveConfig
		policy   bool
		store    pinger
		stopping bool
		want     int
	}{
		{"healthy", serveConfig{}, true, nil, false, 200},
		{"store down, not required", serveConfig{}, true, storeDown, false, 200},
		{"store down, required", serveConfig{healthcheckStore: true}, true, storeDown, false, 500},
		{"no policy, not required", serveConfig{}, false, nil, false, 200},
		{"no policy, required", serveConfig{healthcheckPolicy: true}, false, nil, false, 500},
		{"shutting down", serveConfig{}, true, nil, true, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := tc.store
			if store == nil {
				store = func(context.Context) error { return nil }
			}
			h := newUpstreamHealth(&tc.c, func() bool { return tc.policy }, store)
			h.stopping.Store(tc.stopping)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthcheck", nil))
			wantBody := map[int]string{200: "OK", 500: ""}[tc.want]
			if rec.Code != tc.want || rec.Body.String() != wantBody {
				t.Errorf("%d %q, want %d %q", rec.Code, rec.Body.String(), tc.want, wantBody)
			}
		})
	}
}

// TestServeHTTPOverTLS: --http-tls serves /healthz over TLS with the gRPC
// certificate.
func TestServeHTTPOverTLS(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	srv := ca.Issue(t, true, nil, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": srv.CertPEM, "tls.key": srv.KeyPEM})
	s := startServe(t, []string{"--grpc-tls-cert", sec.Path("tls.crt"), "--grpc-tls-key", sec.Path("tls.key"), "--http-tls"}, nil)
	if s.grpcAddr == "" {
		t.Fatalf("serve did not start (exit %d)", s.code)
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := c.Get("https://" + s.httpAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Errorf("GET https://.../healthz: %d, TLS %v", resp.StatusCode, resp.TLS != nil)
	}
	// Plain HTTP on the TLS listener: Go's server answers 400, never 200.
	if plain, err := http.Get("http://" + s.httpAddr + "/healthz"); err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Error("plain HTTP answered 200 on the TLS listener")
		}
	}
}

// TestPrometheusAddrServesMetrics: USE_PROMETHEUS=true opens a listener of
// its own at PROMETHEUS_ADDR serving /metrics, as upstream's does (Envoy
// Gateway sets PROMETHEUS_ADDR=:19001 and its pods' scrape annotations
// point there); /metrics stays on the HTTP listener too. Without
// USE_PROMETHEUS, PROMETHEUS_ADDR opens nothing, as upstream.
func TestPrometheusAddrServesMetrics(t *testing.T) {
	port := loopbackPort(t)
	startServe(t, nil, map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:" + port})
	resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		t.Fatalf("GET PROMETHEUS_ADDR/metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "throttlekit_policy_reloads_total") {
		t.Errorf("GET PROMETHEUS_ADDR/metrics: %d, throttlekit's metrics in it: %v", resp.StatusCode, strings.Contains(string(body), "throttlekit_"))
	}

	off := loopbackPort(t)
	s := startServe(t, nil, map[string]string{"USE_PROMETHEUS": "false", "PROMETHEUS_ADDR": "127.0.0.1:" + off})
	if conn, err := net.Dial("tcp", "127.0.0.1:"+off); err == nil {
		conn.Close()
		t.Error("PROMETHEUS_ADDR opened a listener with USE_PROMETHEUS=false")
	}
	if !strings.Contains(s.stderr.String(), "PROMETHEUS_ADDR (USE_PROMETHEUS is not true)") {
		t.Error("the start log does not say PROMETHEUS_ADDR was ignored for want of USE_PROMETHEUS")
	}
}

// TestJSONNeedsTheGRPCClientCertificate (issue 32, item 3): /json answers
// ShouldRateLimit, so where the gRPC listener requires a client
// certificate, /json requires the same one. Before, the HTTP listener
// never asked for one, and anyone reaching it spent any tenant's budget.
// Probes (/healthz) still need no certificate.
func TestJSONNeedsTheGRPCClientCertificate(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	srv := ca.Issue(t, true, []string{"127.0.0.1"}, "")
	sec := certtest.NewSecretDir(t, map[string][]byte{"tls.crt": srv.CertPEM, "tls.key": srv.KeyPEM, "ca.crt": ca.PEM})
	envoy := ca.Issue(t, false, []string{"envoy"}, "").Pair(t)
	other := ca.Issue(t, false, []string{"intruder"}, "").Pair(t)
	body := `{"domain":"t","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	post := func(c *http.Client, url string) int {
		t.Helper()
		resp, err := c.Post(url+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	client := func(cert *tls.Certificate) *http.Client {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	mtls := []string{"--grpc-tls-cert", sec.Path("tls.crt"), "--grpc-tls-key", sec.Path("tls.key"), "--grpc-tls-client-ca", sec.Path("ca.crt"), "--grpc-tls-client-san", "envoy"}

	s := startServe(t, append(mtls, "--http-tls"), nil)
	url := "https://" + s.httpAddr
	if got := post(client(nil), url); got != http.StatusForbidden {
		t.Errorf("/json without a client certificate: %d, want 403", got)
	}
	if got := post(client(&other), url); got != http.StatusForbidden {
		t.Errorf("/json with a certificate lacking the SAN: %d, want 403", got)
	}
	if got := post(client(&envoy), url); got != http.StatusOK {
		t.Errorf("/json with Envoy's certificate: %d, want 200", got)
	}
	if resp, err := client(nil).Get(url + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz without a client certificate: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	// The HTTP listener in plain text cannot carry the certificate: /json
	// is refused there, saying how to serve it.
	plain := startServe(t, mtls, nil)
	if got := post(&http.Client{Timeout: 5 * time.Second}, "http://"+plain.httpAddr); got != http.StatusForbidden {
		t.Errorf("/json on the plain HTTP listener of an mTLS sidecar: %d, want 403", got)
	}
}
