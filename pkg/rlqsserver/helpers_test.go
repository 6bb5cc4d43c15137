package rlqsserver_test

import (
	"context"
	"github.com/throttlekit/throttlekit/internal/testenv"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

var (
	bg = context.Background()
	// t0 is a window start of every window length the tests use.
	t0 = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
)

const testPolicy = `
domain: q
descriptors:
  - key: tenant
    rate_limit: {name: per-tenant, unit: minute, requests_per_unit: 100}
  - key: fast
    rate_limit: {name: fast, unit: second, requests_per_unit: 5}
  - key: closed
    rate_limit: {name: closed, unit: minute, requests_per_unit: 0}
  - key: two
    rate_limits:
      - {name: two-minute, unit: minute, requests_per_unit: 50}
      - {name: two-hour, unit: hour, requests_per_unit: 60}
`

// sidecar is one serving process: an engine over a store, the RLQS server
// on a real gRPC listener on loopback.
type sidecar struct {
	eng  *engine.Engine
	srv  *rlqsserver.Server
	addr string
}

func startSidecar(t *testing.T, store gale.Store, clk clock.Clock, opts rlqsserver.Options) *sidecar {
	t.Helper()
	return startSidecarWith(t, testPolicy, store, clk, opts)
}

// startSidecarWith is startSidecar on another policy.
func startSidecarWith(t *testing.T, src string, store gale.Store, clk clock.Clock, opts rlqsserver.Options) *sidecar {
	t.Helper()
	eng, err := engine.New(engine.Options{Store: store, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	d, err := policy.Parse("q.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Load(bg, &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
		t.Fatal(err)
	}
	opts.Resolver, opts.Clock = eng, clk
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(tlog{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = 2 * time.Second // a loaded CI machine: a slow store is not what is tested
	}
	srv, err := rlqsserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		_ = srv.Close(bg)
		_ = eng.Close(bg)
	})
	return &sidecar{eng: eng, srv: srv, addr: lis.Addr().String()}
}

// envoy is one Envoy's stream to a sidecar, as a test drives it.
type envoy struct {
	t      *testing.T
	cancel context.CancelFunc
	st     grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	in     chan *rlqspb.RateLimitQuotaResponse_BucketAction
	ended  chan error
	stash  []*rlqspb.RateLimitQuotaResponse_BucketAction
	domain string
	msgOf  sync.Map // *BucketAction → the number of the message it came in
}

func connect(t *testing.T, s *sidecar) *envoy {
	t.Helper()
	return connectOn(t, dial(t, s))
}

// dial is a new client connection to s, closed when the test ends.
func dial(t *testing.T, s *sidecar) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// connectOn opens an Envoy's stream on conn: several on one conn are one
// client's streams on one connection.
func connectOn(t *testing.T, conn *grpc.ClientConn) *envoy {
	t.Helper()
	ctx, cancel := context.WithCancel(bg)
	st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := &envoy{t: t, cancel: cancel, st: st, in: make(chan *rlqspb.RateLimitQuotaResponse_BucketAction, 1024), ended: make(chan error, 1), domain: "q"}
	var once sync.Once
	go func() {
		for n := 1; ; n++ {
			r, err := st.Recv()
			if err != nil {
				e.ended <- err
				return
			}
			for _, a := range r.GetBucketAction() {
				e.msgOf.Store(a, n)
				e.in <- a
			}
		}
	}()
	t.Cleanup(func() { once.Do(cancel) })
	return e
}

// usage is one bucket's report.
type usage struct {
	bucket          map[string]string
	allowed, denied uint64
	elapsed         time.Duration
}

// report sends one message; with sync, it ends with a usage of a bucket
// without limit, whose ALLOW_ALL answer (sync waits for it) says the
// server has handled the usages before it.
func (e *envoy) report(sync bool, us ...usage) {
	e.t.Helper()
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: e.domain}
	for _, u := range us {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: u.bucket}, TimeElapsed: durationpb.New(u.elapsed),
			NumRequestsAllowed: u.allowed, NumRequestsDenied: u.denied,
		})
	}
	if sync {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"sync": "1"}}, TimeElapsed: durationpb.New(0)})
	}
	if err := e.st.Send(m); err != nil {
		e.t.Fatalf("send: %v", err)
	}
	if sync {
		e.next(map[string]string{"sync": "1"})
	}
}

// subscribe is a bucket's first report: its first request, time elapsed 0.
func (e *envoy) subscribe(bucket map[string]string) {
	e.t.Helper()
	e.report(true, usage{bucket: bucket, allowed: 1})
}

// next waits (5 s at most) for the next action on bucket.
func (e *envoy) next(bucket map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	e.t.Helper()
	for i, a := range e.stash {
		if sameBucket(a.GetBucketId().GetBucket(), bucket) {
			e.stash = append(e.stash[:i], e.stash[i+1:]...)
			return a
		}
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case a := <-e.in:
			if sameBucket(a.GetBucketId().GetBucket(), bucket) {
				return a
			}
			e.stash = append(e.stash, a)
		case err := <-e.ended:
			e.t.Fatalf("stream ended waiting for %v: %v", bucket, err)
		case <-deadline:
			e.t.Fatalf("no action for %v within 5s (stash %v)", bucket, e.stash)
		}
	}
}

// nextGrant is next's first action for bucket that is not a blanket
// DENY_ALL: an Envoy that admits without an assignment (its first request
// was allowed) is told DENY_ALL ahead of each assignment's expiry, and
// the next window's assignment follows.
func (e *envoy) nextGrant(bucket map[string]string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	e.t.Helper()
	for {
		a := e.next(bucket)
		if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
			return a
		}
	}
}

// together reports whether actions a and b came in one message.
func (e *envoy) together(a, b *rlqspb.RateLimitQuotaResponse_BucketAction) bool {
	m, _ := e.msgOf.Load(a)
	n, _ := e.msgOf.Load(b)
	return m != nil && m == n
}

// pending returns the actions received so far for bucket, without waiting.
func (e *envoy) pending(bucket map[string]string) []*rlqspb.RateLimitQuotaResponse_BucketAction {
	for {
		select {
		case a := <-e.in:
			e.stash = append(e.stash, a)
			continue
		default:
		}
		break
	}
	var out []*rlqspb.RateLimitQuotaResponse_BucketAction
	kept := e.stash[:0]
	for _, a := range e.stash {
		if sameBucket(a.GetBucketId().GetBucket(), bucket) {
			out = append(out, a)
		} else {
			kept = append(kept, a)
		}
	}
	e.stash = kept
	return out
}

func (e *envoy) close() {
	e.t.Helper()
	if err := e.st.CloseSend(); err != nil {
		e.t.Fatal(err)
	}
	select {
	case <-e.ended:
	case <-time.After(5 * time.Second):
		e.t.Fatal("stream did not end within 5s of CloseSend")
	}
}

func sameBucket(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// tokens returns a token bucket action's max_tokens and TTL; it fails the
// test for any other action.
func tokens(t *testing.T, a *rlqspb.RateLimitQuotaResponse_BucketAction) (int64, time.Duration) {
	t.Helper()
	qa := a.GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		t.Fatalf("want a token bucket, got %v", a)
	}
	if tb.GetTokensPerFill().GetValue() != 1 {
		t.Errorf("tokens_per_fill %d, want 1", tb.GetTokensPerFill().GetValue())
	}
	return int64(tb.GetMaxTokens()), qa.GetAssignmentTimeToLive().AsDuration()
}

// assigned is a token bucket action's max_tokens and TTL, or 0 and the
// TTL for a blanket DENY_ALL (a stream left without a share of its
// window); it fails the test for any other action.
func assigned(t *testing.T, a *rlqspb.RateLimitQuotaResponse_BucketAction) (int64, time.Duration) {
	t.Helper()
	qa := a.GetQuotaAssignmentAction()
	if qa.GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL && qa.GetRateLimitStrategy().GetTokenBucket() == nil {
		return 0, qa.GetAssignmentTimeToLive().AsDuration()
	}
	return tokens(t, a)
}

// waitFor waits (10 s at most, testenv.Eventually) for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testenv.Eventually(cond) {
		t.Fatalf("%s: not within 10s", what)
	}
}

func ruleStats(s *rlqsserver.Server, name string) rlqsserver.RuleStats {
	for _, r := range s.Stats().Rules {
		if r.Rule.Name == name {
			return r
		}
	}
	return rlqsserver.RuleStats{}
}

// tlog writes a server's log to the test's.
type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
