package main

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
)

// start runs a server on a free loopback port and returns it and a client
// connection to it; both end with the test.
func start(t *testing.T) (*server, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newServer()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- serve(ctx, lis, s) }()
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
	return s, conn
}

func headers(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func requestHeaders() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers:     headers(":method", "GET", ":path", "/api/items", ":authority", "bench.local"),
		EndOfStream: true,
	}}}
}

func responseHeaders() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headers(":status", "200"),
	}}}
}

// exchange sends req on stream and returns the answer.
func exchange(t *testing.T, stream extprocv3.ExternalProcessor_ProcessClient, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	t.Helper()
	if err := stream.Send(req); err != nil {
		t.Fatalf("send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	return resp
}

// closeStream half-closes stream and requires the server to end it cleanly.
func closeStream(t *testing.T, stream extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: got (%v, %v), want io.EOF", resp, err)
	}
}

// waitTally waits for the server's tally to read want: the server records a
// stream after the client has seen it end.
func waitTally(t *testing.T, s *server, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for s.tally.String() != want {
		select {
		case <-deadline:
			t.Fatalf("tally %q, want %q", s.tally.String(), want)
		case <-tick.C:
		}
	}
}

func TestProcessAnswersContinue(t *testing.T) {
	s, conn := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}

	resp := exchange(t, stream, requestHeaders())
	rh := resp.GetRequestHeaders()
	if rh == nil {
		t.Fatalf("request_headers answered with %v, want a request_headers HeadersResponse", resp)
	}
	if resp.GetImmediateResponse() != nil || rh.GetResponse().GetStatus() != extprocv3.CommonResponse_CONTINUE || rh.GetResponse().GetHeaderMutation() != nil {
		t.Errorf("request_headers answered with %v, want a plain CONTINUE", resp)
	}
	if !proto.Equal(resp, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}) {
		t.Errorf("request_headers answered with %v, want an empty HeadersResponse", resp)
	}

	resp = exchange(t, stream, responseHeaders())
	if resp.GetResponseHeaders() == nil {
		t.Fatalf("response_headers answered with %v, want a response_headers HeadersResponse", resp)
	}
	closeStream(t, stream)
	waitTally(t, s, "tally streams=1 complete=1 partial=0 broken=0")
}

// TestBodiesAndTrailers: every kind of message gets the answer of its kind.
func TestBodiesAndTrailers(t *testing.T) {
	s, conn := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		req  *extprocv3.ProcessingRequest
		want func(*extprocv3.ProcessingResponse) bool
	}{
		{requestHeaders(), func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestHeaders() != nil }},
		{&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte("x")}}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestBody() != nil }},
		{&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetRequestTrailers() != nil }},
		{responseHeaders(), func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseHeaders() != nil }},
		{&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("y")}}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseBody() != nil }},
		{&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
			func(r *extprocv3.ProcessingResponse) bool { return r.GetResponseTrailers() != nil }},
	}
	for i, st := range steps {
		if resp := exchange(t, stream, st.req); !st.want(resp) {
			t.Errorf("message %d (%v) answered with %v", i, st.req, resp)
		}
	}
	closeStream(t, stream)
	waitTally(t, s, "tally streams=1 complete=1 partial=0 broken=0")
}

// TestTally: a stream closed after request headers alone is partial, a
// cancelled one broken.
func TestTally(t *testing.T) {
	s, conn := start(t)
	client := extprocv3.NewExternalProcessorClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, stream, requestHeaders())
	closeStream(t, stream)
	waitTally(t, s, "tally streams=1 complete=0 partial=1 broken=0")

	cctx, ccancel := context.WithCancel(ctx)
	stream, err = client.Process(cctx)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, stream, requestHeaders())
	ccancel()
	waitTally(t, s, "tally streams=2 complete=0 partial=1 broken=1")
}

// TestConcurrentStreams shares the prebuilt answers between concurrent
// streams; run under -race it checks nothing writes them.
func TestConcurrentStreams(t *testing.T) {
	s, conn := start(t)
	client := extprocv3.NewExternalProcessorClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const workers, perWorker = 8, 50
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				stream, err := client.Process(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				for _, req := range []*extprocv3.ProcessingRequest{requestHeaders(), responseHeaders()} {
					if err := stream.Send(req); err != nil {
						t.Error(err)
						return
					}
				}
				if err := stream.CloseSend(); err != nil {
					t.Error(err)
					return
				}
				var got []*extprocv3.ProcessingResponse
				for {
					resp, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						t.Error(err)
						return
					}
					got = append(got, resp)
				}
				if len(got) != 2 || got[0].GetRequestHeaders() == nil || got[1].GetResponseHeaders() == nil {
					t.Errorf("answers %v, want request_headers then response_headers", got)
					return
				}
			}
		}()
	}
	wg.Wait()
	waitTally(t, s, "tally streams=400 complete=400 partial=0 broken=0")
}

func TestHealthAndReflection(t *testing.T) {
	_, conn := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	name := extprocv3.ExternalProcessor_ServiceDesc.ServiceName
	for _, svc := range []string{"", name} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v, want SERVING", svc, resp.GetStatus())
		}
	}

	// ghz resolves the method through reflection: the service and the file
	// defining it (with its dependencies) must be served.
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
		found = found || s.GetName() == name
	}
	if !found {
		t.Errorf("reflection does not list %s: %v", name, resp.GetListServicesResponse())
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: name},
	}); err != nil {
		t.Fatal(err)
	}
	if resp, err = stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection has no file for %s: %v", name, resp)
	}
}
