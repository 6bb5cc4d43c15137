package envoyrls

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// GateChooser picks a request's concurrency gate; *engine.Engine is one.
type GateChooser interface {
	ChooseGate(authority, path string, header func(name string) (string, bool)) (ratelimit.GateChoice, bool)
}

// Headers a rejection carries besides retry-after.
const (
	HeaderGate      = "x-throttlekit-gate"
	HeaderGateLimit = "x-throttlekit-concurrency-limit"
)

// ProcessorServer serves envoy.service.ext_proc.v3.ExternalProcessor: it
// gates each HTTP request through the adaptive concurrency gate its headers
// select, and reserves the units of the cost limit they select (Costs),
// settling them at the real cost its response reports. Envoy must send
// request and response headers (processing_mode request_header_mode and
// response_header_mode SEND); a cost limit read from a response trailer
// needs response_trailer_mode SEND, one read from dynamic metadata the
// metadata's namespace forwarded and a message at the response's end
// (response_body_mode STREAMED, or trailers). Bodies are answered
// unchanged.
//
// Process does not recover panics: the gRPC server's stream interceptor
// does, answering the stream INTERNAL (cmd/sidecar), and a slot the stream
// holds is released as dropped on the way out.
type ProcessorServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	gates   GateChooser
	now     func() time.Time
	observe func(gate string, rtt time.Duration, o adaptive.Outcome)
	tracer  trace.Tracer
	costs   CostReserver // nil: no cost limits
	settled func(costLimit string, st ratelimit.Settlement)
	log     *slog.Logger
}

// ProcessorOptions configure a ProcessorServer.
type ProcessorOptions struct {
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Observe, when set, is told every release: the gate, the RTT and the
	// outcome (for an RTT histogram).
	Observe func(gate string, rtt time.Duration, o adaptive.Outcome)
	// Tracer, when set, makes each gated request a span from its request
	// headers to its release (nil: no tracing).
	Tracer trace.Tracer
	// Costs, when set, reserves each request's cost limit (reserve, then
	// settle); nil: requests reserve nothing.
	Costs CostReserver
	// Settled, when set, is told every settlement: the cost limit's name
	// and what it did.
	Settled func(costLimit string, st ratelimit.Settlement)
	// Logger receives settlements that failed (nil: discard).
	Logger *slog.Logger
}

// NewProcessorServer returns a server gating through g.
func NewProcessorServer(g GateChooser, opts ProcessorOptions) *ProcessorServer {
	s := &ProcessorServer{gates: g, now: opts.Now, observe: opts.Observe, tracer: opts.Tracer, costs: opts.Costs, settled: opts.Settled, log: opts.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = discardLogger
	}
	return s
}

// release frees the slot and reports the request.
func (s *ProcessorServer) release(l ratelimit.Held, gate string, start time.Time, o adaptive.Outcome, span gateSpan) {
	now := s.now()
	l.Release(now, o)
	if s.observe != nil {
		s.observe(gate, now.Sub(start), o)
	}
	span.released(o)
}

// Process handles one HTTP request's stream, in Envoy's message order:
// request headers (reserve the cost limit's units and acquire the gate, or
// refuse with an ImmediateResponse), then response headers (release, with
// the RTT from request headers to response headers and the outcome from
// :status: 5xx is an error), and the response's end (settle the
// reservation at the cost read). A stream that ends before the response
// headers (EOF, cancel, reset) releases as dropped; one that ends before
// its cost was read settles at the reservation.
func (s *ProcessorServer) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var lease ratelimit.Held
	var gate string
	var start time.Time
	var span gateSpan
	held := false
	var cost *costHold // the request's reservation, until settled
	defer func() {
		if held {
			s.release(lease, gate, start, adaptive.Dropped, span)
		}
		if cost != nil {
			s.settle(stream.Context(), cost, true)
		}
	}()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// The cost is settled once it is final, after the answer: a store
		// call must not delay the response.
		final := cost != nil && cost.observe(req)
		var resp *extprocv3.ProcessingResponse
		switch m := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if held { // a second request on one stream: Envoy never sends one
				s.release(lease, gate, start, adaptive.Dropped, span)
				held = false
			}
			if cost != nil {
				s.settle(stream.Context(), cost, true)
				cost, final = nil, false
			}
			h := headersOf(m.RequestHeaders.GetHeaders())
			hold, refusal, err := s.reserveCost(stream.Context(), h, s.now())
			if err != nil {
				return err
			}
			if refusal != nil {
				resp = refusal
				break
			}
			cost = hold
			choice, ok := s.gates.ChooseGate(h.get(":authority"), h.get(":path"), h.lookup)
			if !ok {
				resp = continueRequest()
				break
			}
			start = s.now()
			span = s.startGate(stream.Context(), h, choice.Name)
			l, err := choice.Acquire(stream.Context(), start)
			if err != nil {
				if cost != nil { // the request never runs: nothing is spent
					s.settle(stream.Context(), cost, false)
					cost = nil
				}
				if err := stream.Context().Err(); err != nil {
					// Envoy went away while the request waited: CANCELLED
					// or DEADLINE_EXCEEDED, not UNKNOWN.
					err = status.FromContextError(err).Err()
					span.failed(err)
					return err
				}
				resp = reject(choice, start)
				if span.span != nil {
					now := s.now()
					span.rejected(choice.Limit(now), now.Sub(start))
				}
				break
			}
			if span.span != nil {
				span.admitted(s.now().Sub(start))
			}
			lease, gate, held = l, choice.Name, true
			resp = continueRequest()
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			if held {
				outcome := adaptive.OK
				if code, err := strconv.Atoi(headersOf(m.ResponseHeaders.GetHeaders()).get(":status")); err == nil && code >= 500 {
					outcome = adaptive.Error
				}
				s.release(lease, gate, start, outcome, span)
				held = false
			}
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
		default:
			continue // flow-control messages need no answer
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		if final {
			s.settle(stream.Context(), cost, true)
			cost = nil
		}
	}
}

func continueRequest() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}}
}

// reject answers a request the gate turned away, as Envoy's adaptive
// concurrency filter does: an error status (503 by default) with retry-after
// and the gate's name and limit. It reads only the limit (Gate.Limit, not
// Snapshot; a distributed gate's ceiling): rejections come when the backend
// is overloaded, and must cost no more than admissions.
func reject(c ratelimit.GateChoice, now time.Time) *extprocv3.ProcessingResponse {
	set := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	retry := int64((c.RetryAfter + time.Second - 1) / time.Second)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status: &typev3.HttpStatus{Code: typev3.StatusCode(c.Status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			set("retry-after", strconv.FormatInt(retry, 10)),
			set(HeaderGate, c.Name),
			set(HeaderGateLimit, strconv.Itoa(c.Limit(now))),
		}},
		Body:    []byte("concurrency limit reached: " + c.Name + "\n"),
		Details: "throttlekit_concurrency_limit",
	}}}
}

// headerMap reads Envoy's header list (values in raw_value, or in value from
// older Envoys).
type headerMap []*corev3.HeaderValue

func (h headerMap) lookup(name string) (string, bool) {
	for _, kv := range h {
		if strings.EqualFold(kv.GetKey(), name) {
			if raw := kv.GetRawValue(); raw != nil {
				return string(raw), true
			}
			return kv.GetValue(), true
		}
	}
	return "", false
}

func (h headerMap) get(name string) string { v, _ := h.lookup(name); return v }

func headersOf(m *corev3.HeaderMap) headerMap { return m.GetHeaders() }
