// Package otlptest is an in-process OpenTelemetry collector for tests: the
// OTLP trace service (gRPC, and HTTP with protobuf bodies) on loopback
// sockets, keeping every span it is sent.
package otlptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// Attr returns the span's attribute key as a string ("" when absent); an
// array is its values joined by commas.
func (s Span) Attr(key string) string { return attrs(s.Attributes)[key] }

// EventAttrs returns the attributes of the span's events named name.
func (s Span) EventAttrs(name string) []map[string]string {
	var out []map[string]string
	for _, e := range s.Events {
		if e.Name == name {
			out = append(out, attrs(e.Attributes))
		}
	}
	return out
}

// Receiver is the collector. Its methods are safe for concurrent use.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// GRPCAddr and HTTPAddr are host:port of the two listeners.
	GRPCAddr, HTTPAddr string

	mu      sync.Mutex
	spans   []Span
	headers []metadata.MD // of each export call
	changed chan struct{} // closed and replaced on each export
}

// Start starts a receiver; Cleanup stops it.
func Start(tb testing.TB) *Receiver {
	tb.Helper()
	r := &Receiver{changed: make(chan struct{})}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go gs.Serve(gl)
	tb.Cleanup(gs.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(r.serveHTTP)}
	go hs.Serve(hl)
	tb.Cleanup(func() { hs.Close() })
	r.GRPCAddr, r.HTTPAddr = gl.Addr().String(), hl.Addr().String()
	return r
}

// Export is the collector's gRPC method.
func (r *Receiver) Export(ctx context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	r.add(req, md)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveHTTP is OTLP/HTTP's POST /v1/traces with a protobuf body.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	var in collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &in)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	md := metadata.MD{}
	for k, v := range req.Header {
		md.Append(k, v...)
	}
	r.add(&in, md)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) add(req *collectortrace.ExportTraceServiceRequest, md metadata.MD) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, Span{Span: sp, Resource: res})
			}
		}
	}
	r.headers = append(r.headers, md)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Headers returns the metadata of each export call so far.
func (r *Receiver) Headers() []metadata.MD {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]metadata.MD(nil), r.headers...)
}

// Named returns the received spans named name.
func (r *Receiver) Named(name string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// WaitNamed waits (testenv.Eventually's deadline) until n spans named name
// have arrived, and returns them; it fails tb otherwise.
func (r *Receiver) WaitNamed(tb testing.TB, name string, n int) []Span {
	tb.Helper()
	var got []Span
	if !testenv.Eventually(func() bool { got = r.Named(name); return len(got) >= n }) {
		tb.Fatalf("otlptest: %d spans named %q arrived, want %d (all: %d)", len(got), name, n, len(r.Spans()))
	}
	return got
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		out[kv.GetKey()] = value(kv.GetValue())
	}
	return out
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		var s string
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				s += ","
			}
			s += value(e)
		}
		return s
	}
	return ""
}
