package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// start runs the server on a free loopback port and returns a client
// connection to it; both end with the test.
func start(t *testing.T) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return conn
}

func request(descriptors int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 1}
	for i := 0; i < descriptors; i++ {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.0.0.%d", i)}},
		})
	}
	return req
}

func TestShouldRateLimitAnswersOKPerDescriptor(t *testing.T) {
	client := rlsv3.NewRateLimitServiceClient(start(t))
	for _, n := range []int{0, 1, 3, shared, shared + 1, 40} {
		t.Run(fmt.Sprintf("%d descriptors", n), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := client.ShouldRateLimit(ctx, request(n))
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("overall code %v, want OK", resp.GetOverallCode())
			}
			if len(resp.GetStatuses()) != n {
				t.Fatalf("%d statuses, want %d", len(resp.GetStatuses()), n)
			}
			for i, st := range resp.GetStatuses() {
				if st.GetCode() != rlsv3.RateLimitResponse_OK {
					t.Errorf("status %d: %v, want OK", i, st.GetCode())
				}
			}
		})
	}
}

// TestConcurrentCalls shares the preallocated responses between concurrent
// calls; run under -race it checks nothing writes them.
func TestConcurrentCalls(t *testing.T) {
	client := rlsv3.NewRateLimitServiceClient(start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				n := (w + i) % 4
				resp, err := client.ShouldRateLimit(ctx, request(n))
				if err != nil {
					t.Error(err)
					return
				}
				if len(resp.GetStatuses()) != n {
					t.Errorf("%d statuses, want %d", len(resp.GetStatuses()), n)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestHealthAndReflection(t *testing.T) {
	conn := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	for _, svc := range []string{"", rlsv3.RateLimitService_ServiceDesc.ServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v, want SERVING", svc, resp.GetStatus())
		}
	}

	// ghz resolves the method through reflection: the service must be listed.
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.GetName() == rlsv3.RateLimitService_ServiceDesc.ServiceName
	}
	if !found {
		t.Errorf("reflection does not list %s: %v", rlsv3.RateLimitService_ServiceDesc.ServiceName, resp.GetListServicesResponse())
	}
}
