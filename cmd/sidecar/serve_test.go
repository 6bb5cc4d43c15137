package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// exitDeadline bounds how long serve may take to return, after a bad start
// or after its context ends.
const exitDeadline = 10 * time.Second

// testPolicy is one rate-limit rule and one concurrency gate.
const testPolicy = `domain: t
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    controller: aimd
    min_limit: 1
    initial_limit: 4
    max_limit: 100
    queue: {max: 10, timeout: 50ms}
`

// sidecar is one `throttlekit serve` run inside the test process, on free
// loopback ports, logging JSON to stderr.
type sidecar struct {
	grpcAddr, httpAddr string // empty when it never served
	stderr             *testenv.Buffer
	exit               chan int // run's exit code, once it returns
	code               int      // the exit code, when it returned before serving
}

// storeDeadline is the --store-timeout of a serve whose test judges its
// answers, not how fast the store gives them. Serve's default (50ms) is a
// production budget that a machine running two race-enabled suites misses
// on a live local Redis; missed, a request answers UNAVAILABLE, a probe
// reports the store down and the start check takes a refusal for an
// outage, each in a test about something else. A Redis a test kills
// refuses the connection at once, so this does not slow noticing it.
var storeDeadline = []string{"--store-timeout", testenv.StoreDeadline.String()}

// startServe runs `throttlekit serve` with args and the environment env,
// on testPolicy, until it logs "serving" or returns. Cleanup stops it.
func startServe(t *testing.T, args []string, env map[string]string) *sidecar {
	t.Helper()
	return startServeWith(t, testPolicy, args, env)
}

// startServeWith is startServe on the policy file policy.
func startServeWith(t *testing.T, policy string, args []string, env map[string]string) *sidecar {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--drain-timeout", "2s"}, args...)
	return runServe(t, args, func(k string) string { return memoryStore(env)[k] })
}

// runServe runs the binary's entry point with args and the environment
// getenv until it logs "serving" or returns (code is then its exit code);
// Cleanup stops it.
func runServe(t *testing.T, args []string, getenv func(string) string) *sidecar {
	t.Helper()
	s := &sidecar{stderr: &testenv.Buffer{}, exit: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.exit <- run(ctx, args, getenv, io.Discard, s.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.exit:
		case <-time.After(exitDeadline):
			t.Errorf("serve still running %v after its context ended", exitDeadline)
		}
		if t.Failed() {
			t.Logf("serve output:\n%s", s.stderr.String())
		}
	})
	returned := false
	if !testenv.Eventually(func() bool {
		select {
		case s.code = <-s.exit:
			s.exit <- s.code // for Cleanup
			returned = true
			return true
		default:
		}
		s.grpcAddr, s.httpAddr = servingAddrs(s.stderr.String())
		return s.grpcAddr != ""
	}) {
		t.Fatal("serve neither logged \"serving\" nor returned")
	}
	if returned {
		s.grpcAddr, s.httpAddr = servingAddrs(s.stderr.String())
	}
	return s
}

// servingAddrs reads the listen addresses from the "serving" line, JSON
// or text.
func servingAddrs(log string) (grpcAddr, httpAddr string) {
	for _, line := range strings.Split(log, "\n") {
		var l struct{ Msg, GRPC, HTTP string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving" {
			return l.GRPC, l.HTTP
		}
		if textField(line, "msg") == "serving" {
			return textField(line, "grpc"), textField(line, "http")
		}
	}
	return "", ""
}

// textField is key's value in a line of log/slog's text format
// (key=value, the value quoted when it must be), or "".
func textField(line, key string) string {
	s := " " + line
	i := strings.Index(s, " "+key+"=")
	if i < 0 {
		return ""
	}
	v := s[i+len(key)+2:]
	if strings.HasPrefix(v, `"`) {
		q, err := strconv.QuotedPrefix(v)
		if err != nil {
			return ""
		}
		v, _ = strconv.Unquote(q)
		return v
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}

// get fetches path from the sidecar's HTTP server.
func (s *sidecar) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + s.httpAddr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric is one series of a /metrics scrape.
type metric struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads /metrics in the text exposition format.
func (s *sidecar) scrape(t *testing.T) []metric {
	t.Helper()
	code, body := s.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	var out []metric
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, v, ok := strings.Cut(line, " ")
		value, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			t.Fatalf("/metrics: unreadable line %q", line)
		}
		m := metric{name: series, labels: map[string]string{}, value: value}
		if name, rest, ok := strings.Cut(series, "{"); ok {
			m.name = name
			for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				m.labels[k] = strings.Trim(v, `"`)
			}
		}
		out = append(out, m)
	}
	return out
}

// gauge is the value of the unlabelled series name, or -1 without one.
func (s *sidecar) gauge(t *testing.T, name string) float64 {
	t.Helper()
	for _, m := range s.scrape(t) {
		if m.name == name && len(m.labels) == 0 {
			return m.value
		}
	}
	return -1
}

// health asks grpc.health.v1 about service over a real gRPC connection.
func (s *sidecar) health(t *testing.T, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("health of %q: %v", service, err)
	}
	return resp.GetStatus()
}

// storeState is what the sidecar says of its store, everywhere it says it.
type storeState struct {
	up      float64 // throttlekit_store_up
	readyz  int     // GET /readyz
	overall healthpb.HealthCheckResponse_ServingStatus
	rls     healthpb.HealthCheckResponse_ServingStatus
	extProc healthpb.HealthCheckResponse_ServingStatus
}

func (st storeState) String() string {
	return fmt.Sprintf("store_up %v, /readyz %d, health %q %v, RateLimitService %v, ExternalProcessor %v",
		st.up, st.readyz, "", st.overall, st.rls, st.extProc)
}

// TestStoreProbeDrivesReadiness kills Redis under a running sidecar that
// nobody calls: store_up turns to "down" from the background probe alone,
// and back once Redis returns. /readyz and grpc.health.v1 stay ready (the
// sidecar can answer: each rule answers a store outage by its failure
// mode), saying so in /readyz's body; with --ready-needs-store they turn
// to "down" and back with it (issue 42, item 3: as a native sidecar,
// readiness counts toward the application pod's, and a Redis outage took
// the application out of its Service). The concurrency gates (ext_proc)
// need no store and stay SERVING.
func TestStoreProbeDrivesReadiness(t *testing.T) {
	for _, needs := range []bool{false, true} {
		t.Run(fmt.Sprintf("ready needs store %v", needs), func(t *testing.T) { testStoreProbeDrivesReadiness(t, needs) })
	}
}

func testStoreProbeDrivesReadiness(t *testing.T, needsStore bool) {
	r := testenv.StartRedis(t)
	// The env twin, so the test runs (and fails) on a build without the flag.
	// The probe judges whether Redis answers, not how fast: storeDeadline,
	// or a probe that misses 50ms on a loaded machine logs an outage that
	// never was.
	env := map[string]string{"THROTTLEKIT_STORE_PROBE_INTERVAL": "20ms"}
	if needsStore {
		env["THROTTLEKIT_READY_NEEDS_STORE"] = "true"
	}
	s := startServe(t, append([]string{"--store", "redis", "--redis-url", r.URL()}, storeDeadline...), env)
	if s.grpcAddr == "" {
		t.Fatalf("serve did not start (exit %d)", s.code)
	}
	rlsName := rlsv3.RateLimitService_ServiceDesc.ServiceName
	extName := extprocv3.ExternalProcessor_ServiceDesc.ServiceName
	const serving, notServing = healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING

	// Each signal is waited for alone, store_up first: reading /readyz
	// must not be what moves the gauge.
	waitFor := func(phase, what string, cond func() bool) {
		t.Helper()
		if !testenv.Eventually(cond) {
			t.Errorf("%s: %s within 10s", phase, what)
		}
	}
	expect := func(phase string, up float64, ready int, status healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		waitFor(phase, fmt.Sprintf("no throttlekit_store_up %v", up), func() bool { return s.gauge(t, "throttlekit_store_up") == up })
		waitFor(phase, fmt.Sprintf("grpc health of %q not %v", "", status), func() bool { return s.health(t, "") == status })
		waitFor(phase, fmt.Sprintf("grpc health of %s not %v", rlsName, status), func() bool { return s.health(t, rlsName) == status })
		waitFor(phase, fmt.Sprintf("GET /readyz not %d", ready), func() bool { code, _ := s.get(t, "/readyz"); return code == ready })
		if got := s.health(t, extName); got != serving {
			t.Errorf("%s: health of %s %v, want SERVING (gates need no store)", phase, extName, got)
		}
		code, body := s.get(t, "/readyz")
		if down := up == 0; down != strings.Contains(body, "store unreachable") {
			t.Errorf("%s: /readyz says %q: want it to name the store's outage exactly while store_up is 0", phase, body)
		}
		t.Logf("%s: %v", phase, storeState{s.gauge(t, "throttlekit_store_up"), code, s.health(t, ""), s.health(t, rlsName), s.health(t, extName)})
	}
	expect("Redis up", 1, http.StatusOK, serving)
	r.Kill()
	if needsStore {
		expect("Redis killed", 0, http.StatusServiceUnavailable, notServing)
	} else {
		expect("Redis killed", 0, http.StatusOK, serving)
	}
	r.Restart()
	expect("Redis restarted", 1, http.StatusOK, serving)

	// The outage is logged once, where it starts, not once per probe; and
	// Redis came back empty, a new server: that once too
	// (TestStoreRestartIsCountedLoggedAndKept).
	var warnings []string
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		var l struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && (l.Level == "WARN" || l.Level == "ERROR") {
			warnings = append(warnings, l.Msg)
		}
	}
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "store unreachable") || !strings.HasPrefix(warnings[1], "store restarted") {
		t.Errorf("warnings logged over one outage: %q; want two, \"store unreachable...\" and \"store restarted...\"", warnings)
	}
}

// TestStoreProbeIntervalFlag: the flag, its twin and its validation.
func TestStoreProbeIntervalFlag(t *testing.T) {
	c, err := parseServe(nil, env(nil), io.Discard)
	if err != nil || c.storeProbeInterval != time.Second {
		t.Fatalf("default: %v, %v; want 1s", c, err)
	}
	c, err = parseServe(nil, env(map[string]string{"THROTTLEKIT_STORE_PROBE_INTERVAL": "250ms"}), io.Discard)
	if err != nil || c.storeProbeInterval != 250*time.Millisecond {
		t.Fatalf("env twin: %v, %v; want 250ms", c, err)
	}
	if _, err := parseServe([]string{"--store-probe-interval", "0s"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "--store-probe-interval") {
		t.Fatalf("0s accepted: %v", err)
	}
}
