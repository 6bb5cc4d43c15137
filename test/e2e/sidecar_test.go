package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// Deadlines of the harness. They bound waits on conditions; none is a
// pause: every wait ends as soon as its condition holds.
const (
	startDeadline = 20 * time.Second // the serving line, then /readyz 200
	callDeadline  = 5 * time.Second  // one gRPC or HTTP call
	exitDeadline  = 10 * time.Second // the process exiting after a signal
	pollInterval  = 10 * time.Millisecond
)

// options says how to start one sidecar.
type options struct {
	// store is "memory" or "redis"; redisURL goes with "redis".
	store    string
	redisURL string
	// headers passes --response-headers.
	headers bool
	// dial are more gRPC client options (a stats handler, say).
	dial []grpc.DialOption
	// args are more flags; files more policy files (name → content).
	args  []string
	files map[string]string
}

// sidecar is one running throttlekit process and a gRPC client to it. Its
// policy directory holds the example policies and e2e.yaml.
type sidecar struct {
	policyDir string
	nodeID    string // its --node-id when a test gives it one
	grpcAddr  string
	httpAddr  string
	conn      *grpc.ClientConn
	rls       rlsv3.RateLimitServiceClient
	http      *http.Client

	cmd    *exec.Cmd
	log    *testenv.ServingLog
	exited chan struct{} // closed once the process has exited
	err    error         // cmd.Wait's result; read only after exited is closed
}

// startSidecar starts the binary on loopback ports with a fresh policy
// directory (the example policies plus e2e.yaml), waits until it serves and
// /readyz answers 200, and dials it. Cleanup kills the process; when the test
// failed it logs the process's stderr.
func startSidecar(t *testing.T, o options) *sidecar {
	t.Helper()
	s := &sidecar{
		policyDir: t.TempDir(),
		log:       testenv.NewServingLog(),
		exited:    make(chan struct{}),
		http:      &http.Client{Timeout: callDeadline},
	}
	copyExamplePolicies(t, s.policyDir)
	writePolicy(t, s.policyDir, e2ePolicy(defaultE2E))
	for name, content := range o.files {
		if err := os.WriteFile(filepath.Join(s.policyDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	args := []string{"serve",
		"--policy", s.policyDir,
		"--store", o.store,
		"--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0",
		"--log-format", "json",
		"--log-level", "info",
		"--node-id", "e2e",
		"--store-timeout", storeTimeout.String(),
		"--store-probe-interval", "50ms", // throttlekit_store_up follows the store within a probe
		"--reload-debounce", "50ms",
		"--drain-timeout", "5s",
	}
	if o.store == "redis" {
		args = append(args, "--redis-url", o.redisURL)
	}
	if o.headers {
		args = append(args, "--response-headers")
	}
	args = append(args, o.args...)
	s.cmd = exec.Command(binPath, args...)
	s.cmd.Env = environWithout("THROTTLEKIT_")
	s.cmd.Stdout = s.log
	s.cmd.Stderr = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binPath, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.kill()
		if strings.Contains(s.log.String(), "WARNING: DATA RACE") {
			t.Errorf("the race detector found a data race in throttlekit (its output follows)")
		}
		if t.Failed() {
			t.Logf("throttlekit %s output:\n%s", strings.Join(args, " "), s.log.String())
		}
	})

	select {
	case addrs := <-s.log.Serving:
		s.grpcAddr, s.httpAddr = addrs.GRPC, addrs.HTTP
	case <-s.exited:
		t.Fatalf("throttlekit exited before serving (%v); its output is logged below", s.err)
	case <-time.After(startDeadline):
		t.Fatalf("throttlekit logged no \"serving\" line within %v; its output is logged below", startDeadline)
	}
	waitFor(t, startDeadline, "GET /readyz answers 200 after start", func() (bool, string) {
		code, body, err := s.get("/readyz")
		return err == nil && code == http.StatusOK, fmt.Sprintf("status %d, body %q, error %v", code, body, err)
	})

	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, o.dial...)
	conn, err := grpc.NewClient(s.grpcAddr, opts...)
	if err != nil {
		t.Fatalf("grpc.NewClient(%s): %v", s.grpcAddr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.conn, s.rls = conn, rlsv3.NewRateLimitServiceClient(conn)
	return s
}

// kill stops the process at once if it still runs, and waits for it.
func (s *sidecar) kill() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// signal sends sig to the process.
func (s *sidecar) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %v to throttlekit: %v", sig, err)
	}
}

// waitExit waits for the process to exit and returns its exit status.
func (s *sidecar) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-s.exited:
	case <-time.After(within):
		t.Fatalf("throttlekit still running %v after the signal", within)
	}
	var exit *exec.ExitError
	switch {
	case s.err == nil:
		return 0
	case errors.As(s.err, &exit):
		return exit.ExitCode()
	}
	t.Fatalf("waiting for throttlekit: %v", s.err)
	return -1
}

// should calls ShouldRateLimit and fails the test on any gRPC error.
func (s *sidecar) should(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := s.call(req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// call is ShouldRateLimit with the call deadline.
func (s *sidecar) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	return s.rls.ShouldRateLimit(ctx, req)
}

// get fetches path from the HTTP server.
func (s *sidecar) get(path string) (int, string, error) {
	resp, err := s.http.Get("http://" + s.httpAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// post sends body to path as JSON.
func (s *sidecar) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	resp, err := s.http.Post("http://"+s.httpAddr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	return resp.StatusCode, string(out)
}

// metrics scrapes GET /metrics.
func (s *sidecar) metrics(t *testing.T) metricSet {
	t.Helper()
	code, body, err := s.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, error %v", code, err)
	}
	m, err := parseMetrics(body)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	return m
}

// waitFor checks cond until it holds or within has passed, pausing
// pollInterval between checks; past the deadline it fails the test with
// cond's last explanation. It returns how long the condition took.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	took, ok, why := poll(within, cond)
	if !ok {
		t.Fatalf("%s: still false after %v; last check: %s", what, within, why)
	}
	return took
}

// poll is waitFor without failing: it reports whether cond came to hold
// within the deadline, and when.
func poll(within time.Duration, cond func() (bool, string)) (took time.Duration, ok bool, why string) {
	start := time.Now()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if ok, why = cond(); ok {
			return time.Since(start), true, why
		}
		if time.Since(start) > within {
			return time.Since(start), false, why
		}
		<-tick.C
	}
}

// environWithout is the environment less the variables with prefix, so that
// a THROTTLEKIT_* set where the tests run cannot change what they start.
func environWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}
