// Command noop is the floor of the RLS benchmark (scripts/bench-rls.sh): an
// Envoy RateLimitService v3 server that decides nothing and answers OK, with
// one OK status per descriptor. What throttlekit costs is its RPS and latency
// measured against this server's, on the same machine, with the same client.
//
// It serves, like throttlekit, grpc.health.v1 and server reflection (ghz
// finds the method through reflection) on one gRPC server.
//
//	go run ./test/bench/noop -addr 127.0.0.1:18081
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18081", "gRPC listen address")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "noop: RateLimitService on", lis.Addr())
	if err := serve(ctx, lis); err != nil {
		fmt.Fprintln(os.Stderr, "noop:", err)
		os.Exit(1)
	}
}

// serve answers on lis until ctx is done, then stops gracefully.
func serve(ctx context.Context, lis net.Listener) error {
	s := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(s, newServer())
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)

	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		hs.Shutdown()
		s.GracefulStop()
	}()
	err := s.Serve(lis)
	<-done
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// shared is how many descriptors a request may have and still get a shared,
// preallocated response. Envoy sends one descriptor per matching rate_limits
// entry: a handful.
const shared = 16

// server is the no-op RateLimitServiceServer. Safe for concurrent use: its
// state is built once and only read.
type server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	// ok[n] is the answer to a request with n descriptors. Responses are
	// never modified after newServer, and gRPC only reads (marshals) what a
	// handler returns, so every call shares them and allocates nothing.
	ok [shared + 1]*rlsv3.RateLimitResponse
}

func newServer() *server {
	s := new(server)
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, shared)
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	for n := range s.ok {
		s.ok[n] = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses[:n:n]}
	}
	return s
}

// ShouldRateLimit answers OK, with one OK status per descriptor.
func (s *server) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := len(req.GetDescriptors())
	if n <= shared {
		return s.ok[n], nil
	}
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range statuses {
		statuses[i] = s.ok[1].Statuses[0]
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}
