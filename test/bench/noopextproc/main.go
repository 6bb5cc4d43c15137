// Command noopextproc is the floor of the ext_proc benchmark
// (scripts/bench-extproc.sh): an Envoy ExternalProcessor (ext_proc v3) server
// that gates nothing and answers every message CONTINUE. What throttlekit's
// concurrency gating costs is its streams per second and latency measured
// against this server's, on the same machine, with the same client.
//
// It serves, like throttlekit, grpc.health.v1 and server reflection (ghz
// finds the method through reflection) on one gRPC server. On exit it prints
// one tally line (see tally.String) that the bench reads to check that every
// stream got an answer to each of its messages.
//
//	go run ./test/bench/noopextproc -addr 127.0.0.1:18082
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18082", "gRPC listen address")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "noopextproc:", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "noopextproc: ExternalProcessor on", lis.Addr())
	s := newServer()
	err = serve(ctx, lis, s)
	fmt.Fprintln(os.Stderr, "noopextproc:", s.tally.String())
	if err != nil {
		fmt.Fprintln(os.Stderr, "noopextproc:", err)
		os.Exit(1)
	}
}

// serve answers on lis with s until ctx is done, then stops gracefully.
func serve(ctx context.Context, lis net.Listener, s *server) error {
	gs := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(gs, s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		hs.Shutdown()
		gs.GracefulStop()
	}()
	err := gs.Serve(lis)
	<-done
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// server is the no-op ExternalProcessorServer. Safe for concurrent use: its
// answers are built once and only read, its tally is atomic.
type server struct {
	extprocv3.UnimplementedExternalProcessorServer
	// The answers, one per kind of message. They are never modified after
	// newServer, and gRPC only reads (marshals) what a handler sends, so
	// every stream shares them.
	requestHeaders, responseHeaders   *extprocv3.ProcessingResponse
	requestBody, responseBody         *extprocv3.ProcessingResponse
	requestTrailers, responseTrailers *extprocv3.ProcessingResponse
	tally                             tally
}

func newServer() *server {
	return &server{
		requestHeaders:   &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}},
		responseHeaders:  &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}},
		requestBody:      &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}},
		responseBody:     &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}},
		requestTrailers:  &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}},
		responseTrailers: &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}},
	}
}

// tally counts streams as they end, so the bench can check, beside ghz's
// report (which shows how each stream ended, not how many answers it got),
// that the streams it measured were answered in full.
type tally struct {
	// streams is every stream that ended.
	streams atomic.Int64
	// complete is the streams the client closed after this server answered
	// exactly one request_headers and one response_headers message.
	complete atomic.Int64
	// partial is the streams the client closed with another count of
	// headers messages answered: a bench request other than the expected one.
	partial atomic.Int64
	// broken is the streams that ended without the client closing them
	// (cancelled, reset or a failed send): at the end of a ghz run, the calls
	// in flight.
	broken atomic.Int64
}

// String is the tally line: "tally streams=N complete=N partial=N broken=N".
func (t *tally) String() string {
	return fmt.Sprintf("tally streams=%d complete=%d partial=%d broken=%d",
		t.streams.Load(), t.complete.Load(), t.partial.Load(), t.broken.Load())
}

// end records one stream that ended; closed is whether the client closed it.
func (t *tally) end(closed bool, reqHeaders, respHeaders int) {
	t.streams.Add(1)
	switch {
	case !closed:
		t.broken.Add(1)
	case reqHeaders == 1 && respHeaders == 1:
		t.complete.Add(1)
	default:
		t.partial.Add(1)
	}
}

// Process answers each message of one HTTP request's stream CONTINUE, until
// the client closes the stream.
func (s *server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	// One request message for the whole stream: the codec resets it before
	// each unmarshal.
	req := new(extprocv3.ProcessingRequest)
	var reqHeaders, respHeaders int
	for {
		if err := stream.RecvMsg(req); err != nil {
			closed := errors.Is(err, io.EOF)
			s.tally.end(closed, reqHeaders, respHeaders)
			if closed {
				return nil
			}
			return err
		}
		var resp *extprocv3.ProcessingResponse
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = s.requestHeaders
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = s.responseHeaders
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = s.requestBody
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = s.responseBody
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = s.requestTrailers
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = s.responseTrailers
		default:
			continue // flow-control messages need no answer
		}
		if err := stream.Send(resp); err != nil {
			s.tally.end(false, reqHeaders, respHeaders)
			return err
		}
		switch resp {
		case s.requestHeaders:
			reqHeaders++
		case s.responseHeaders:
			respHeaders++
		}
	}
}
