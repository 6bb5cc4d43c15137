package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// probePolicy has a per-path limit small enough to exhaust from a test and
// a gate that admits one request at a time and never queues.
const probePolicy = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: path
    value: /x
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    descriptors:
      - key: path
        rate_limit: {name: per-user-path, unit: second, unit_multiplier: 30, requests_per_unit: 2}
concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    controller: aimd
    min_limit: 1
    initial_limit: 1
    max_limit: 1
`

// inProcess is `throttlekit serve` running inside the test on free
// loopback ports.
type inProcess struct {
	grpcAddr, httpAddr, policyDir string
}

// startInProcess runs `throttlekit serve` on files (name → contents), with
// extra flags, until it logs "serving"; Cleanup stops it and waits for it
// to return.
func startInProcess(t *testing.T, files map[string]string, extra ...string) *inProcess {
	t.Helper()
	s := &inProcess{policyDir: t.TempDir()}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(s.policyDir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"serve", "--policy", s.policyDir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--log-format", "json", "--drain-timeout", "2s"}
	args = append(args, extra...)
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, args, env(nil), io.Discard, &logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("serve still running 10s after its context ended")
		}
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	})
	served := testenv.Eventually(func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			var rec struct{ Msg, GRPC, HTTP string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" {
				s.grpcAddr, s.httpAddr = rec.GRPC, rec.HTTP
				return true
			}
		}
		select {
		case code := <-exited:
			exited <- code
			return true
		default:
			return false
		}
	})
	if !served || s.grpcAddr == "" {
		t.Fatalf("serve did not log \"serving\":\n%s", logs.String())
	}
	return s
}

// runProbe runs `throttlekit probe` with args.
func runProbe(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errs testenv.Buffer
	code = run(ctx, append([]string{"probe"}, args...), env(nil), &out, &errs)
	return code, out.String(), errs.String()
}

// TestProbeSaysOverLimit: probe sends one ShouldRateLimit and says what
// came back in words, descriptor by descriptor; OVER_LIMIT exits 3.
func TestProbeSaysOverLimit(t *testing.T) {
	s := startInProcess(t, map[string]string{"edge.yaml": probePolicy})
	ctx := context.Background()
	code, out, errs := runProbe(ctx, "--addr", s.grpcAddr, "--domain", "edge", "--descriptor", "remote_address=1.2.3.4", "--descriptor", "path=/x", "--hits", "5")
	okLine := regexp.MustCompile(`(?m)^  OK: descriptor path=/x, limit 5 per minute, remaining 0, resets in \d+(\.\d)?s$`)
	if code != 0 || !strings.HasPrefix(out, "OK\n") || !okLine.MatchString(out) ||
		!strings.Contains(out, "  OK: descriptor remote_address=1.2.3.4, limit 1000 per second, remaining 995, resets in ") {
		t.Fatalf("5 hits of 5: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}
	code, out, errs = runProbe(ctx, "--addr", s.grpcAddr, "--domain", "edge", "--descriptor", "path=/x")
	over := regexp.MustCompile(`^OVER_LIMIT: descriptor path=/x, limit 5 per minute, remaining 0, resets in \d+(\.\d)?s\n$`)
	if code != 3 || !over.MatchString(out) {
		t.Fatalf("the 6th hit: exit %d, stdout:\n%s\nstderr: %s\nwant exit 3 and %s", code, out, errs, over)
	}
	code, out, _ = runProbe(ctx, "--addr", s.grpcAddr, "--domain", "edge", "--descriptor", "user=alice,path=/y")
	if want := "OK: descriptor user=alice,path=/y, limit per-user-path: 2 per 30 seconds, remaining 1, resets in "; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("a nested descriptor: exit %d, stdout %q; want %q...", code, out, want)
	}
	code, out, _ = runProbe(ctx, "--addr", s.grpcAddr, "--domain", "edge", "--descriptor", "unknown=1")
	if want := "OK: descriptor unknown=1, no limit applies\n"; code != 0 || out != want {
		t.Errorf("no rule: exit %d, stdout %q; want %q", code, out, want)
	}
}

// TestProbeChecksThenCharges: --check-only and --charge send what Envoy
// sends for a cost-based limit (a descriptor hits_addend of 0 when the
// request starts, the cost when it is done), and probe says the answers:
// a charge past the limit is OVER_LIMIT (exit 3) and counted, so the next
// check-only call is refused too.
func TestProbeChecksThenCharges(t *testing.T) {
	s := startInProcess(t, map[string]string{"ai.yaml": "domain: ai\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n"})
	ctx := context.Background()
	for _, step := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--check-only"}, 0, "OK: descriptor user=alice, limit 10 per hour, remaining 10, resets in "},
		{[]string{"--check-only"}, 0, "OK: descriptor user=alice, limit 10 per hour, remaining 10, resets in "},
		{[]string{"--charge", "10"}, 0, "OK: descriptor user=alice, limit 10 per hour, remaining 0, resets in "},
		{[]string{"--check-only"}, 0, "OK: descriptor user=alice, limit 10 per hour, remaining 0, resets in "},
		{[]string{"--charge", "7"}, 3, "OVER_LIMIT: descriptor user=alice, limit 10 per hour, remaining 0, resets in "},
		{[]string{"--check-only"}, 3, "OVER_LIMIT: descriptor user=alice, limit 10 per hour, remaining 0, resets in "},
	} {
		args := append([]string{"--addr", s.grpcAddr, "--domain", "ai", "--descriptor", "user=alice"}, step.args...)
		code, out, errs := runProbe(ctx, args...)
		if code != step.code || !strings.HasPrefix(out, step.want) {
			t.Fatalf("probe %v: exit %d, stdout %q, stderr %q; want exit %d and %q...", step.args, code, out, errs, step.code, step.want)
		}
	}
	resp, err := http.Get("http://" + s.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`throttlekit_charges_total{domain="ai",kind="check_only",rule="user"} 4`,
		`throttlekit_charges_total{domain="ai",kind="charge",rule="user"} 2`,
		`throttlekit_charge_overrun_units_total{domain="ai",rule="user"} 7`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestProbeSaysWhenAGateRejects: one probe holds the gate's only slot; a
// second is rejected with the gate's name, status and limit; once the first
// lets go, a probe goes through and releases its slot.
func TestProbeSaysWhenAGateRejects(t *testing.T) {
	s := startInProcess(t, map[string]string{"edge.yaml": probePolicy})
	holdCtx, release := context.WithCancel(context.Background())
	defer release()
	var holdOut, holdErr testenv.Buffer
	held := make(chan int, 1)
	go func() {
		held <- run(holdCtx, []string{"probe", "--addr", s.grpcAddr, "--extproc", "--path", "/checkout", "--hold", "1m"}, env(nil), &holdOut, &holdErr)
	}()
	if !testenv.Eventually(func() bool { return strings.Contains(holdOut.String(), "admitted") }) {
		t.Fatalf("the holding probe was not admitted: stdout %q, stderr %q", holdOut.String(), holdErr.String())
	}
	if want := "admitted: GET /checkout continues; holding the request open for 1m"; !strings.HasPrefix(holdOut.String(), want) {
		t.Errorf("holding probe: %q, want %q...", holdOut.String(), want)
	}

	code, out, errs := runProbe(context.Background(), "--addr", s.grpcAddr, "--extproc", "--path", "/checkout/pay")
	if want := "rejected by gate checkout: 503, concurrency limit 1 reached (retry-after 1s)\n"; code != 3 || out != want {
		t.Fatalf("second probe: exit %d, stdout %q, stderr %q; want exit 3 and %q", code, out, errs, want)
	}

	release()
	select {
	case code := <-held:
		if code != 1 || !strings.Contains(holdErr.String(), "interrupted") {
			t.Errorf("the interrupted holder: exit %d, stderr %q", code, holdErr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holding probe did not return within 10s of its context ending")
	}
	var last string
	if !testenv.Eventually(func() bool {
		code, last, _ = runProbe(context.Background(), "--addr", s.grpcAddr, "--extproc", "--path", "/checkout", "--hold", "0s", "--status", "200")
		return code == 0
	}) {
		t.Fatalf("the slot was never freed: last probe said %q", last)
	}
	if !strings.Contains(last, "admitted") || !strings.Contains(last, "released: sent response headers (:status 200)") {
		t.Errorf("a probe through a free gate: %q", last)
	}
	code, out, _ = runProbe(context.Background(), "--addr", s.grpcAddr, "--extproc", "--path", "/elsewhere")
	if code != 0 || !strings.HasPrefix(out, "admitted: GET /elsewhere continues") {
		t.Errorf("a path no gate matches: exit %d, %q", code, out)
	}
}

// TestProbeSaysWhatIsWrong: bad arguments exit 2 with one line saying what
// to write; an address nobody answers on exits 1 and says so.
func TestProbeSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--descriptor", "path=/x"}, "--domain is required"},
		{[]string{"--domain", "edge"}, "give at least one --descriptor"},
		{[]string{"--domain", "edge", "--descriptor", "novalue"}, `--descriptor "novalue": want key=value`},
		{[]string{"--domain", "edge", "--descriptor", "a=1", "--hits", "0"}, "--hits must be at least 1"},
		{[]string{"--domain", "edge", "--descriptor", "a=1", "--check-only", "--charge", "3"}, "give one of --hits, --check-only and --charge"},
		{[]string{"--domain", "edge", "--descriptor", "a=1", "--hits", "2", "--charge", "3"}, "give one of --hits, --check-only and --charge"},
		{[]string{"--domain", "edge", "--descriptor", "a=1", "--charge", "0"}, "--charge must be at least 1"},
		{[]string{"--extproc", "--check-only"}, "--domain and --descriptor go without --extproc"},
		{[]string{"--extproc", "--path", "checkout"}, "--path must start with /"},
		{[]string{"--extproc", "--domain", "edge"}, "--domain and --descriptor go without --extproc"},
		{[]string{"extra"}, "probe takes no arguments"},
	} {
		code, _, errs := runProbe(context.Background(), tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	code, _, errs := runProbe(context.Background(), "--addr", addr, "--domain", "edge", "--descriptor", "a=1")
	if code != 1 || !strings.Contains(errs, "cannot reach throttlekit at "+addr) {
		t.Errorf("nobody listening: exit %d, stderr %q", code, errs)
	}
}

// FuzzParseDescriptor: a --descriptor either fails with a message quoting
// it, or reads as entries with keys that write back to the same text.
func FuzzParseDescriptor(f *testing.F) {
	for _, s := range []string{"path=/x", "user=alice,path=/v1/export", "a==b", "k=", "=v", "novalue", "a=1,,b=2", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		es, err := parseDescriptor(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("error %q does not quote the descriptor", err)
			}
			return
		}
		parts := make([]string, len(es))
		for i, e := range es {
			if e.key == "" || strings.Contains(e.key, "=") || strings.Contains(e.key+e.value, ",") {
				t.Fatalf("entry %+v of %q", e, s)
			}
			parts[i] = e.key + "=" + e.value
		}
		if got := strings.Join(parts, ","); got != s {
			t.Fatalf("%q read as %q", s, got)
		}
	})
}

// TestProbeRLQS (issue 42, item 6): probe --rlqs subscribes one bucket as
// Envoy's rate_limit_quota filter does (its first request, denied by
// DENY_ALL, reported at once) and says what serve --rlqs sent: a token
// bucket for a windowed rule (exit 0), ALLOW_ALL where no limit matches
// (exit 0), DENY_ALL for a limit of 0 (exit 3). Before, RLQS could not be
// seen working without an Envoy.
func TestProbeRLQS(t *testing.T) {
	const policy = "domain: q\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 80}\n  - key: blocked\n    rate_limit: {unit: hour, requests_per_unit: 0}\n"
	s := startInProcess(t, map[string]string{"q.yaml": policy}, "--rlqs")
	ctx := context.Background()
	// A subscription in a window's last second or so is told DENY_ALL to
	// its end, and assigned at the next (make test once probed at
	// 12:54:59 of a minute window): ask again, a new subscriber, until
	// the window has moved on, within the test's deadline.
	assigned := func(args []string) (int, string, string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, out, errs := runProbe(ctx, append([]string{"--rlqs", "--addr", s.grpcAddr, "--timeout", "10s"}, args...)...)
			if !strings.HasPrefix(out, "DENY_ALL") || time.Now().After(deadline) {
				return code, out, errs
			}
		}
	}
	if code, out, errs := assigned([]string{"--domain", "q", "--descriptor", "tenant=acme"}); code != 0 || !strings.Contains(out, "ASSIGNED: bucket tenant=acme: a token bucket of ") {
		t.Errorf("tenant=acme: exit %d, stdout %q, stderr %q; want exit 0 and a token bucket", code, out, errs)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--domain", "other", "--descriptor", "tenant=acme"}, 0, "ALLOW_ALL: bucket tenant=acme"},
		{[]string{"--domain", "q", "--descriptor", "blocked=x"}, 3, "DENY_ALL: bucket blocked=x"},
	} {
		code, out, errs := runProbe(ctx, append([]string{"--rlqs", "--addr", s.grpcAddr, "--timeout", "10s"}, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errs, tc.code, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rlqs", "--descriptor", "a=1"}, "--rlqs needs --domain"},
		{[]string{"--rlqs", "--domain", "q"}, "--rlqs takes one --descriptor"},
		{[]string{"--rlqs", "--domain", "q", "--descriptor", "a=1", "--descriptor", "b=2"}, "--rlqs takes one --descriptor"},
		{[]string{"--rlqs", "--domain", "q", "--descriptor", "a=1", "--hits", "2"}, "--hits does not go with --rlqs"},
		{[]string{"--rlqs", "--extproc", "--domain", "q", "--descriptor", "a=1"}, "--extproc does not go with --rlqs"},
	} {
		code, _, errs := runProbe(ctx, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestProbeSettlesACost (issue 42, item 6): probe --extproc sends the
// response's end where a cost limit reads the real cost (a response
// header, a trailer, or dynamic metadata, as Envoy forwards them) and
// says, from the sidecar's /metrics, what the request reserved and how it
// settled. Before, a cost known at the end could not be seen settling
// without an Envoy.
func TestProbeSettlesACost(t *testing.T) {
	const llm = `domain: llm
descriptors:
  - key: tenant
    rate_limit: {name: tokens, unit: hour, requests_per_unit: 100000}
costs:
  - name: chat
    match: {path_prefix: /chat}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: 4000
    cost: {response_header: x-tokens}
  - name: meta
    match: {path_prefix: /meta}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: 1000
    cost: {metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}}
  - name: trail
    match: {path_prefix: /trail}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: 500
    cost: {response_trailer: x-usage}
`
	s := startInProcess(t, map[string]string{"llm.yaml": llm})
	ctx := context.Background()
	metrics := "http://" + s.httpAddr + "/metrics"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--path", "/chat", "--header", "x-tenant=acme", "--response-header", "x-tokens=1200"},
			"cost: reserved 4000 of rule tokens (domain llm), settled at 1200: 2800 given back"},
		{[]string{"--path", "/meta", "--header", "x-tenant=acme", "--metadata", "io.envoy.ai_gateway:llm_total_token=1500"},
			"cost: reserved 1000 of rule tokens (domain llm), settled at 1500: 500 more counted"},
		{[]string{"--path", "/trail", "--header", "x-tenant=acme", "--response-trailer", "x-usage=20"},
			"cost: reserved 500 of rule tokens (domain llm), settled at 20: 480 given back"},
	} {
		code, out, errs := runProbe(ctx, append([]string{"--extproc", "--addr", s.grpcAddr, "--metrics-url", metrics}, tc.args...)...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errs, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--extproc", "--metadata", "nokey=1"}, "--metadata \"nokey=1\": want namespace:key=value"},
		{[]string{"--extproc", "--response-header", "x"}, "--response-header \"x\": want name=value"},
		{[]string{"--domain", "d", "--descriptor", "a=1", "--response-trailer", "t=1"}, "--response-trailer goes with --extproc"},
	} {
		code, _, errs := runProbe(ctx, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}
