package envoyrls

import (
	"context"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// Span attributes. Names follow OpenTelemetry's conventions: lower case,
// dot-separated, in the product's own namespace.
const (
	AttrDomain      = "ratelimit.domain"
	AttrDescriptors = "ratelimit.descriptors"
	AttrOutcome     = "ratelimit.outcome" // OK, OVER_LIMIT, or the gRPC code of an error
	AttrStoreTrips  = "ratelimit.store_round_trips"
	AttrRules       = "ratelimit.rules" // domain/name of each limit asked, in order
	AttrModes       = "ratelimit.modes" // and its mode
	AttrDescriptor  = "ratelimit.descriptor"
	AttrRule        = "ratelimit.rule"
	AttrMode        = "ratelimit.mode"
	AttrAlgorithm   = "ratelimit.algorithm"
	AttrCode        = "ratelimit.code"
	AttrShadow      = "ratelimit.shadow"
	AttrFallback    = "ratelimit.fallback"
	AttrRefunded    = "ratelimit.refunded"

	AttrGate      = "concurrency.gate"
	AttrGateLimit = "concurrency.limit"
	AttrWaitMS    = "concurrency.queue_wait_ms"
	AttrRelease   = "concurrency.release" // ok, error, dropped
)

// serverSpan is the option every span here starts with (made once: an
// option built per call allocates).
var serverSpan = trace.WithSpanKind(trace.SpanKindServer)

// traceContext is W3C trace context (traceparent, tracestate): what Envoy's
// tracers send on the gRPC calls they make and on the requests they forward.
var traceContext propagation.TraceContext

// incomingCarrier reads the trace context fields of a call's incoming gRPC
// metadata as a propagation.TextMapCarrier, without copying the metadata
// (metadata.FromIncomingContext copies all of it).
type incomingCarrier struct{ ctx context.Context }

func (c incomingCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c incomingCarrier) Set(string, string) {} // read only
func (c incomingCarrier) Keys() []string     { return traceContext.Fields() }

// headerCarrier reads Envoy's header list as a propagation.TextMapCarrier.
type headerCarrier headerMap

func (c headerCarrier) Get(key string) string { return headerMap(c).get(key) }
func (c headerCarrier) Set(string, string)    {} // read only
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for _, kv := range c {
		keys = append(keys, strings.ToLower(kv.GetKey()))
	}
	return keys
}

// incoming returns ctx carrying the remote span context of the call's gRPC
// metadata, if it has one.
func incoming(ctx context.Context) context.Context {
	return traceContext.Extract(ctx, incomingCarrier{ctx})
}

// shouldRateLimitTraced is ShouldRateLimit inside a span.
func (s *RateLimitServer) shouldRateLimitTraced(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, span := s.tracer.Start(incoming(ctx), "ShouldRateLimit", serverSpan)
	defer span.End()
	if !span.IsRecording() { // sampled out
		return s.decide(ctx, req, nil)
	}
	span.SetAttributes(attribute.String(AttrDomain, req.GetDomain()), attribute.Int(AttrDescriptors, len(req.GetDescriptors())))
	var tr ratelimit.Trace
	resp, err := s.decide(ctx, req, &tr)
	if err != nil {
		st, _ := status.FromError(err)
		span.SetAttributes(attribute.String(AttrOutcome, st.Code().String()))
		span.SetStatus(otelcodes.Error, st.Message())
		return nil, err
	}
	rules := make([]string, len(tr.Limits))
	modes := make([]string, len(tr.Limits))
	for i, l := range tr.Limits {
		rules[i] = l.Rule.Domain + "/" + l.Rule.Name
		modes[i] = string(l.Mode)
		span.AddEvent("limit", trace.WithAttributes(
			attribute.Int(AttrDescriptor, l.Descriptor),
			attribute.String(AttrRule, rules[i]),
			attribute.String(AttrMode, modes[i]),
			attribute.String(AttrAlgorithm, string(l.Algorithm)),
			attribute.String(AttrCode, l.Code.String()),
			attribute.Int(AttrStoreTrips, l.StoreTrips),
			attribute.Bool(AttrShadow, l.Shadow),
			attribute.Bool(AttrFallback, l.Fallback),
			attribute.Bool(AttrRefunded, l.Refunded),
		))
	}
	span.SetAttributes(
		attribute.String(AttrOutcome, resp.GetOverallCode().String()),
		attribute.Int(AttrStoreTrips, tr.StoreTrips),
		attribute.StringSlice(AttrRules, rules),
		attribute.StringSlice(AttrModes, modes),
	)
	return resp, nil
}

// gateSpan is the span of one gated request, from its request headers to
// its release (response headers, or the stream's end); nil without a
// tracer.
type gateSpan struct{ span trace.Span }

// startGate starts the span of a request gate is deciding: the child of the
// trace context in the stream's gRPC metadata, or, when Envoy sent none
// there, of the one in the request's own headers.
func (s *ProcessorServer) startGate(ctx context.Context, h headerMap, gate string) gateSpan {
	if s.tracer == nil {
		return gateSpan{}
	}
	parent := incoming(ctx)
	if !trace.SpanContextFromContext(parent).IsValid() {
		parent = traceContext.Extract(ctx, headerCarrier(h))
	}
	_, span := s.tracer.Start(parent, "ConcurrencyGate", serverSpan)
	if !span.IsRecording() {
		span.End()
		return gateSpan{}
	}
	span.SetAttributes(attribute.String(AttrGate, gate))
	return gateSpan{span}
}

// admitted records an admission after wait in the queue.
func (g gateSpan) admitted(wait time.Duration) {
	if g.span != nil {
		g.span.SetAttributes(attribute.String(AttrOutcome, "admitted"), attribute.Float64(AttrWaitMS, float64(wait)/float64(time.Millisecond)))
	}
}

// rejected ends the span of a request the gate turned away at limit.
func (g gateSpan) rejected(limit int, wait time.Duration) {
	if g.span != nil {
		g.span.SetAttributes(attribute.String(AttrOutcome, "rejected"), attribute.Int(AttrGateLimit, limit),
			attribute.Float64(AttrWaitMS, float64(wait)/float64(time.Millisecond)))
		g.span.End()
	}
}

// failed ends the span of a request whose stream ended while it waited.
func (g gateSpan) failed(err error) {
	if g.span != nil {
		g.span.SetAttributes(attribute.String(AttrOutcome, status.Code(err).String()))
		g.span.SetStatus(otelcodes.Error, err.Error())
		g.span.End()
	}
}

// released ends the span of an admitted request with how it ended.
func (g gateSpan) released(o adaptive.Outcome) {
	if g.span != nil {
		g.span.SetAttributes(attribute.String(AttrRelease, o.String()))
		g.span.End()
	}
}
