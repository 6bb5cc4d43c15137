package envoyrls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/throttlekit/throttlekit/internal/otlptest"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// tracer exports every span at once, over OTLP/gRPC, to a receiver in the
// test; sampler decides which traces are recorded.
func tracer(t *testing.T, sampler sdktrace.Sampler) (trace.Tracer, *otlptest.Receiver) {
	t.Helper()
	rcv := otlptest.Start(t)
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(rcv.GRPCAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("throttlekit-test"), rcv
}

// The W3C trace context Envoy would send: version 00, a trace id, the
// parent span id, sampled.
const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + traceID + "-" + parentSpan + "-01"
)

// TestShouldRateLimitSpans: with a tracer, each ShouldRateLimit is a span
// exported over OTLP/gRPC, the child of the trace context in the call's
// metadata, saying the domain, each limit's rule, mode and verdict, the
// store round trips and the outcome; an invalid request's span is an error.
func TestShouldRateLimitSpans(t *testing.T) {
	tr, rcv := tracer(t, sdktrace.AlwaysSample())
	c := serveGRPC(t, envoyrls.NewRateLimitServer(newEngine(t, memstore.New()), envoyrls.Options{Now: func() time.Time { return t0 }, Tracer: tr}))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	for range 3 { // per_ip allows 2 a minute: OK, OK, OVER_LIMIT
		if _, err := c.ShouldRateLimit(ctx, rlReq("edge", "remote_address", "10.0.0.1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}); err == nil {
		t.Fatal("an empty request was answered")
	}
	spans := rcv.WaitNamed(t, "ShouldRateLimit", 4)
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		s := spans[i]
		if got := fmt.Sprintf("%x", s.TraceId); got != traceID {
			t.Errorf("span %d: trace id %s, want the caller's %s", i, got, traceID)
		}
		if got := fmt.Sprintf("%x", s.ParentSpanId); got != parentSpan {
			t.Errorf("span %d: parent %s, want the caller's span %s", i, got, parentSpan)
		}
		if s.Kind.String() != "SPAN_KIND_SERVER" {
			t.Errorf("span %d: kind %v", i, s.Kind)
		}
		for k, v := range map[string]string{
			envoyrls.AttrDomain: "edge", envoyrls.AttrOutcome: want, envoyrls.AttrStoreTrips: "1",
			envoyrls.AttrRules: "edge/per_ip", envoyrls.AttrModes: "strict", envoyrls.AttrDescriptors: "1",
		} {
			if got := s.Attr(k); got != v {
				t.Errorf("span %d: %s = %q, want %q", i, k, got, v)
			}
		}
		ev := s.EventAttrs("limit")
		if len(ev) != 1 || ev[0][envoyrls.AttrRule] != "edge/per_ip" || ev[0][envoyrls.AttrCode] != want ||
			ev[0][envoyrls.AttrAlgorithm] != "fixed_window" || ev[0][envoyrls.AttrStoreTrips] != "1" {
			t.Errorf("span %d: limit events %v", i, ev)
		}
	}
	bad := spans[3]
	if bad.Status.GetCode().String() != "STATUS_CODE_ERROR" || bad.Attr(envoyrls.AttrOutcome) != "InvalidArgument" {
		t.Errorf("invalid request's span: status %v, outcome %q", bad.Status, bad.Attr(envoyrls.AttrOutcome))
	}
	if len(bad.ParentSpanId) != 0 {
		t.Errorf("a call without trace context got parent %x", bad.ParentSpanId)
	}
}

// TestUnsampledTraceIsNotExported: the caller's "not sampled" flag is
// followed (a parent-based sampler), and nothing is exported.
func TestUnsampledTraceIsNotExported(t *testing.T) {
	tr, rcv := tracer(t, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	c := serveGRPC(t, envoyrls.NewRateLimitServer(newEngine(t, memstore.New()), envoyrls.Options{Tracer: tr}))
	notSampled := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentSpan+"-00")
	if _, err := c.ShouldRateLimit(notSampled, rlReq("edge", "remote_address", "10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ShouldRateLimit(context.Background(), rlReq("edge", "remote_address", "10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	// The syncer exports as each span ends: the second, sampled span is
	// there, the first is not.
	spans := rcv.WaitNamed(t, "ShouldRateLimit", 1)
	if len(spans) != 1 || fmt.Sprintf("%x", spans[0].TraceId) == traceID {
		t.Fatalf("exported %d spans (%v), want only the sampled one", len(spans), spans)
	}
}

// TestExtProcGateSpans: with a tracer, each gated request is a span from its
// request headers to its release, the child of the trace context in the
// stream's metadata or else in the request's headers, saying the gate, the
// decision and how the request ended.
func TestExtProcGateSpans(t *testing.T) {
	tr, rcv := tracer(t, sdktrace.AlwaysSample())
	e := newGateEngine(t)
	c := extprocv3.NewExternalProcessorClient(listen(t, func(gs *grpc.Server) {
		extprocv3.RegisterExternalProcessorServer(gs, envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{Tracer: tr}))
	}))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	first, resp := open(t, ctx, c, "/checkout/pay") // admitted: the gate's one slot
	if resp.GetRequestHeaders() == nil {
		t.Fatalf("first: %v", resp)
	}
	// The second comes with the trace context in its HTTP headers only.
	second, err := c.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	const headerParent = "b7ad6b7169203331"
	req := requestHeaders("/checkout/pay")
	req.GetRequestHeaders().Headers.Headers = append(req.GetRequestHeaders().Headers.Headers,
		headers("traceparent", "00-"+traceID+"-"+headerParent+"-01").Headers...)
	if err := second.Send(req); err != nil {
		t.Fatal(err)
	}
	if resp, err := second.Recv(); err != nil || resp.GetImmediateResponse() == nil {
		t.Fatalf("second: %v %v", resp, err)
	}
	if err := first.Send(responseHeaders("503")); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Recv(); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitNamed(t, "ConcurrencyGate", 2)
	byOutcome := map[string]otlptest.Span{}
	for _, s := range spans {
		byOutcome[s.Attr(envoyrls.AttrOutcome)] = s
	}
	adm, rej := byOutcome["admitted"], byOutcome["rejected"]
	if adm.Span == nil || rej.Span == nil {
		t.Fatalf("spans %v, want one admitted and one rejected", spans)
	}
	if adm.Attr(envoyrls.AttrGate) != "checkout" || adm.Attr(envoyrls.AttrRelease) != "error" || fmt.Sprintf("%x", adm.ParentSpanId) != parentSpan {
		t.Errorf("admitted span: gate %q, release %q, parent %x", adm.Attr(envoyrls.AttrGate), adm.Attr(envoyrls.AttrRelease), adm.ParentSpanId)
	}
	if rej.Attr(envoyrls.AttrGateLimit) != "1" || fmt.Sprintf("%x", rej.ParentSpanId) != headerParent {
		t.Errorf("rejected span: limit %q, parent %x (want the request header's %s)", rej.Attr(envoyrls.AttrGateLimit), rej.ParentSpanId, headerParent)
	}
}
