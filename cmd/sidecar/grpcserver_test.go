package main

import (
	"context"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// heldRLS answers ShouldRateLimit only when the test lets a call go, so the
// test decides how many are in progress.
type heldRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	entered chan struct{}
	release chan struct{}
}

func (h *heldRLS) ShouldRateLimit(ctx context.Context, _ *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	h.entered <- struct{}{}
	<-h.release
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// With --grpc-max-inflight 2 and two checks in progress, a third is
// answered RESOURCE_EXHAUSTED at once and counted; health checks still
// pass; once one check ends, the next is served again.
func TestShedderAnswersTheExcessAtOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newShedder(2, reg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	limits := grpcLimits{maxStreams: 1024, keepaliveTime: time.Minute, keepaliveTimeout: time.Second, keepaliveMinTime: time.Second}
	gs := grpc.NewServer(append(limits.options(), grpc.ChainUnaryInterceptor(s.interceptor()))...)
	h := &heldRLS{entered: make(chan struct{}, 8), release: make(chan struct{})}
	rlsv3.RegisterRateLimitServiceServer(gs, h)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()

	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d"})
			errs <- err
		}()
		<-h.entered
	}
	third, cancel := context.WithTimeout(ctx, 5*time.Second) // not queued: answered at once
	defer cancel()
	_, err = rls.ShouldRateLimit(third, &rlsv3.RateLimitRequest{Domain: "d"})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("third check with two in progress: %v, want RESOURCE_EXHAUSTED", err)
	}
	if n := gathered(t, reg, "throttlekit_grpc_shed_total", map[string]string{"reason": "inflight"}); n != 1 {
		t.Fatalf("shed inflight counted %v, want 1", n)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check while checks are shed: %v", err)
	}
	h.release <- struct{}{}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// One slot is free once the handler's return has been counted down.
	if !testenv.Eventually(func() bool { return s.inflight.Load() == 1 }) {
		t.Fatalf("in progress %d after one check ended, want 1", s.inflight.Load())
	}
	go func() {
		_, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d"})
		errs <- err
	}()
	<-h.entered
	close(h.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A check whose caller's deadline passed before it ran is dropped, counted
// as expired, with the context's code; 0 means no limit.
func TestShedderDropsExpiredChecks(t *testing.T) {
	s := newShedder(0, prometheus.NewRegistry())
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	ran := false
	_, err := s.interceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: shouldRateLimit}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	if ran || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("expired check: ran %v, error %v; want not run, DEADLINE_EXCEEDED", ran, err)
	}
	for range 5000 { // no limit: none shed
		if _, err := s.interceptor()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: shouldRateLimit},
			func(context.Context, any) (any, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
}
