package deploy

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// dashPolicy has what the core panels show: a leased rule (local hits,
// leases; evictions past --max-keys 3, see user), a cached_deny rule
// that is over its limit (over-limit ratio, cached denials), a gate held
// full (rejections) and a gate requests pass (RTT).
var dashPolicy = map[string]string{
	"dash.yaml": `domain: dash
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: second, requests_per_unit: 1000}
    mode: leased
    lease: {batch: 10}
  - key: path
    value: /login
    rate_limit: {name: login, unit: hour, requests_per_unit: 2}
    mode: cached_deny
`,
	"gates.yaml": `concurrency:
  - name: held
    match: {path_prefix: /held}
    controller: aimd
    min_limit: 1
    initial_limit: 1
    max_limit: 1
    params: {timeout: 250ms, backoff: 0.5, increase: 1}
  - name: work
    match: {path_prefix: /work}
    controller: aimd
    min_limit: 1
    initial_limit: 4
    max_limit: 16
    params: {timeout: 250ms, backoff: 0.5, increase: 1}
`,
}

// promVars are what the test gives the dashboard's variables (Grafana's
// own, $__rate_interval, as at least four scrapes of the test's Prometheus).
var promVars = strings.NewReplacer("$__rate_interval", "5s", "$job", "throttlekit", "$instance", ".*")

// TestDashboardQueriesReturnData runs every panel's queries through a real
// Prometheus scraping a real `throttlekit serve` (Redis store) under a
// little traffic: RLS calls over gRPC and ext_proc streams through both
// gates. Every query must parse and run; every core panel must return a
// finite value; every metric a panel names must be in the scrape, unless it
// exists only in situations the test does not create (situationalMetrics).
func TestDashboardQueriesReturnData(t *testing.T) {
	panels := loadDashboard(t)
	redis := testenv.StartRedis(t)
	dir := t.TempDir()
	for name, content := range dashPolicy {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := startServe(t, []string{}, "--policy", dir, "--store", "redis", "--redis-url", "redis://"+redis.Addr+"/0",
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json", "--node-id", "dash", "--max-keys", "3",
		"--store-timeout", "2s") // generous: the machine is shared, and a store error fails the traffic
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	// Hold the held gate's one slot for the whole test.
	held, err := admit(ctx, extprocv3.NewExternalProcessorClient(conn), "/held")
	if err != nil {
		t.Fatalf("holding the held gate: %v", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := traffic(ctx, conn); err != nil && ctx.Err() == nil {
			errs <- err
		}
	}()
	defer func() { stop(); wg.Wait(); _ = held.CloseSend() }()

	base := startPrometheus(t, s.httpAddr)
	type query struct{ panel, expr string }
	var core, rest []query
	for _, p := range panels {
		for _, tg := range p.Targets {
			q := query{p.Title, promVars.Replace(tg.Expr)}
			if slices.Contains(corePanels, p.Title) {
				core = append(core, q)
			} else {
				rest = append(rest, q)
			}
		}
	}
	// Rates need two scrapes with traffic between them: wait until each
	// core query has a finite value.
	pending, start := core, time.Now()
	ok := waitUntil(25*time.Second, func() bool {
		select {
		case err := <-errs:
			t.Fatalf("traffic: %v", err)
		default:
		}
		var still []query
		for _, q := range pending {
			if res, err := promQuery(base, q.expr); err != nil || !hasFinite(res) || (slices.Contains(busyPanels, q.panel) && !hasPositive(res)) {
				still = append(still, q)
			}
		}
		pending = still
		return len(pending) == 0
	})
	for _, q := range pending {
		res, err := promQuery(base, q.expr)
		t.Errorf("core panel %q: no finite value (busy panels: none above 0) within 25s: %s → %v (error %v)", q.panel, q.expr, res, err)
	}
	if ok {
		t.Logf("every core panel had data %v after Prometheus started", time.Since(start).Round(time.Millisecond))
	}
	for _, q := range rest {
		if _, err := promQuery(base, q.expr); err != nil {
			t.Errorf("panel %q: %s: %v", q.panel, q.expr, err)
		}
	}
	res, err := promQuery(base, `count by (__name__) ({__name__=~"throttlekit_.+", job="throttlekit"})`)
	if err != nil {
		t.Fatal(err)
	}
	scraped := map[string]bool{}
	for _, r := range res {
		name := r.Metric["__name__"]
		scraped[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
	}
	for name, panel := range dashboardMetrics(panels) {
		if !scraped[name] && !situationalMetrics.MatchString(name) {
			t.Errorf("panel %q names %s, which the sidecar's /metrics does not have", panel, name)
		}
	}
}

// busyPanels are core panels whose every query must show more than zero
// under the test's traffic: each shows that the traffic reaches what the
// panel is about (refusals, local hits, evictions, gate refusals, RTT).
var busyPanels = []string{"Over-limit ratio", "Leased local-hit ratio", "L1 evictions and cached denials",
	"Gate admissions and rejections", "Gate RTT", "Round trips per admission", "Unknown domains"}

func hasPositive(res []promResult) bool {
	for _, r := range res {
		if f := r.float(); f > 0 && !math.IsInf(f, 0) {
			return true
		}
	}
	return false
}

func hasFinite(res []promResult) bool {
	for _, r := range res {
		if f := r.float(); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return true
		}
	}
	return false
}

// user is the i-th request's user: u0 every other request, so its leased
// credits stay in the local tier (local hits); u1 to u4 in turn otherwise,
// four keys through the three slots --max-keys leaves (evictions).
func user(i int) string {
	if i%2 == 0 {
		return "u0"
	}
	return fmt.Sprint("u", 1+i/2%4)
}

// traffic sends, every 5 ms until ctx ends: a leased check (see user), a /login check (over its limit after two), a request through the
// work gate (admitted, answered), one to the held gate (refused: its slot
// is held) and, every tenth round, a check of a domain no policy defines.
func traffic(ctx context.Context, conn *grpc.ClientConn) error {
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ep := extprocv3.NewExternalProcessorClient(conn)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		domain := "dash"
		if i%10 == 0 {
			domain = "nowhere"
		}
		_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonrlv3.RateLimitDescriptor{
			{Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user(i)}}},
			{Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/login"}}},
		}})
		if err != nil {
			return fmt.Errorf("ShouldRateLimit: %w", err)
		}
		if err := passAndRefuse(ctx, ep); err != nil {
			return err
		}
	}
}

// passAndRefuse sends one request through the work gate, answered 200, and
// one to the held gate, which refuses it. Each stream ends with its request.
func passAndRefuse(ctx context.Context, ep extprocv3.ExternalProcessorClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := admit(ctx, ep, "/work")
	if err != nil {
		return fmt.Errorf("/work: %w", err)
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}}}}); err != nil {
		return err
	}
	if _, err := stream.Recv(); err != nil {
		return fmt.Errorf("/work response headers: %w", err)
	}
	_ = stream.CloseSend()
	if _, err := admit(ctx, ep, "/held"); err == nil || !strings.Contains(err.Error(), "refused") {
		return fmt.Errorf("/held: want a refusal, got %v", err)
	}
	return nil
}

// admit opens an ext_proc stream for a request to path and sends its
// headers as Envoy would; it returns the stream once the gate answers
// CONTINUE, and an error saying "refused" when it answers with an immediate
// response.
func admit(ctx context.Context, c extprocv3.ExternalProcessorClient, path string) (extprocv3.ExternalProcessor_ProcessClient, error) {
	stream, err := c.Process(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte(path)}}}}}}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	switch {
	case err != nil:
		return nil, err
	case resp.GetImmediateResponse() != nil:
		_ = stream.CloseSend()
		return nil, fmt.Errorf("refused with %d", resp.GetImmediateResponse().GetStatus().GetCode())
	case resp.GetRequestHeaders() == nil:
		return nil, fmt.Errorf("unexpected answer to request headers: %v", resp)
	}
	return stream, nil
}
