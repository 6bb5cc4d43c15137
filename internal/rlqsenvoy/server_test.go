package rlqsenvoy

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// testServer is a small real RLQS server: it records every report message and
// lets the test answer on, or reset, the current stream.
type testServer struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	addr    string
	grpc    *grpc.Server
	reports chan *rlqsv3.RateLimitQuotaUsageReports

	mu      sync.Mutex
	current *serverStream
	opened  int
}

type serverStream struct {
	send  chan *rlqsv3.RateLimitQuotaResponse
	reset chan struct{}
}

func startTestServer(t *testing.T, addr string) *testServer {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &testServer{addr: lis.Addr().String(), grpc: grpc.NewServer(), reports: make(chan *rlqsv3.RateLimitQuotaUsageReports, 1024)}
	rlqsv3.RegisterRateLimitQuotaServiceServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(lis) }()
	t.Cleanup(s.grpc.Stop)
	return s
}

func (s *testServer) StreamRateLimitQuotas(st rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ss := &serverStream{send: make(chan *rlqsv3.RateLimitQuotaResponse, 16), reset: make(chan struct{})}
	s.mu.Lock()
	s.current = ss
	s.opened++
	s.mu.Unlock()
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.reports <- m
		}
	}()
	for {
		select {
		case r := <-ss.send:
			if err := st.Send(r); err != nil {
				return err
			}
		case <-ss.reset:
			return status.Error(codes.Unavailable, "test reset")
		case <-recvErr:
			return nil
		}
	}
}

func (s *testServer) streams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// respond sends resp on the current stream.
func (s *testServer) respond(t *testing.T, resp *rlqsv3.RateLimitQuotaResponse) {
	t.Helper()
	s.mu.Lock()
	ss := s.current
	s.mu.Unlock()
	if ss == nil {
		t.Fatal("no stream to respond on")
	}
	ss.send <- resp
}

// resetStream ends the current stream with UNAVAILABLE.
func (s *testServer) resetStream() {
	s.mu.Lock()
	ss := s.current
	s.current = nil
	s.mu.Unlock()
	if ss != nil {
		close(ss.reset)
	}
}

// next returns the next report message, failing after 10 s.
func (s *testServer) next(t *testing.T) *rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	select {
	case m := <-s.reports:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no report message within 10 s")
		return nil
	}
}

// none checks that no report message is waiting.
func (s *testServer) none(t *testing.T) {
	t.Helper()
	select {
	case m := <-s.reports:
		t.Fatalf("unexpected report %v", m)
	default:
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestFilter returns a filter on a fake clock talking to srvs.
func newTestFilter(t *testing.T, cfg Config, srvs ...*testServer) (*Filter, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(t0)
	cfg.Clock = clk
	if cfg.Domain == "" {
		cfg.Domain = "d"
	}
	for _, s := range srvs {
		cfg.Servers = append(cfg.Servers, s.addr)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(f.Close)
	return f, clk
}

// waitResponses waits until the filter has applied n responses in all.
func waitResponses(t *testing.T, f *Filter, n int) {
	t.Helper()
	if !testenv.Eventually(func() bool { return f.Stats().Responses >= n }) {
		t.Fatalf("responses applied = %d, want %d", f.Stats().Responses, n)
	}
}

// admits counts how many of n requests on id are allowed.
func admits(f *Filter, id map[string]string, n int) int {
	got := 0
	for i := 0; i < n; i++ {
		if f.Decide(id) {
			got++
		}
	}
	return got
}

func blanket(allow bool) *typev3.RateLimitStrategy {
	r := typev3.RateLimitStrategy_DENY_ALL
	if allow {
		r = typev3.RateLimitStrategy_ALLOW_ALL
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

func tokenBucketStrategy(maxTokens, perFill uint32, fill time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill),
	}}}
}

func rptu() *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 100, TimeUnit: typev3.RateLimitUnit_SECOND},
	}}
}

func assign(id map[string]string, s *typev3.RateLimitStrategy, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				RateLimitStrategy: s, AssignmentTimeToLive: durationpb.New(ttl),
			},
		},
	}}}
}

func abandon(id map[string]string) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}}}
}

// usageOf returns the usage for id in m, failing if absent.
func usageOf(t *testing.T, m *rlqsv3.RateLimitQuotaUsageReports, id map[string]string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	t.Helper()
	for _, u := range m.GetBucketQuotaUsages() {
		if bucketKey(u.GetBucketId().GetBucket()) == bucketKey(id) {
			return u
		}
	}
	t.Fatalf("bucket %v not in report %v", id, m)
	return nil
}

func checkUsage(t *testing.T, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, allowed, denied uint64, elapsed int64) {
	t.Helper()
	if u.GetNumRequestsAllowed() != allowed || u.GetNumRequestsDenied() != denied || u.GetTimeElapsed().GetSeconds() != elapsed || u.GetTimeElapsed().GetNanos() != 0 {
		t.Fatalf("usage = allowed %d denied %d elapsed %v, want %d %d %ds", u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().AsDuration(), allowed, denied, elapsed)
	}
}

// tick advances the fake clock by one report interval and returns the
// report message it produced.
func tick(t *testing.T, clk *clock.Fake, srv *testServer) *rlqsv3.RateLimitQuotaUsageReports {
	t.Helper()
	clk.Advance(DefaultReportInterval)
	return srv.next(t)
}

var _ = context.Background
