// Package envoyrls adapts Envoy's gRPC protocols to the engine: the
// RateLimitService v3 (ShouldRateLimit, and the same request as JSON over
// HTTP). It translates protobuf to the engine's request, and the engine's
// response back to protobuf; it decides nothing itself. It speaks to the
// engine through the interfaces it defines here (Decider, GateChooser,
// CostReserver) and package ratelimit's types, and imports neither the
// engine, the policy nor the limiters.
package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// Decider answers rate-limit requests into a Response the caller owns (and
// reuses); *engine.Engine is one.
type Decider interface {
	DecideInto(ctx context.Context, req *ratelimit.Request, now time.Time, resp *ratelimit.Response) error
}

// responses are the engine Responses of requests in progress: each is
// turned into protobuf, then reused.
var responses = sync.Pool{New: func() any { return new(ratelimit.Response) }}

// Header names of the rate-limit response headers (envoyproxy/ratelimit's).
const (
	HeaderLimit     = "RateLimit-Limit"
	HeaderRemaining = "RateLimit-Remaining"
	HeaderReset     = "RateLimit-Reset"
)

// RateLimitServer serves envoy.service.ratelimit.v3.RateLimitService.
type RateLimitServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	decider Decider
	now     func() time.Time
	headers bool
	tracer  trace.Tracer // nil: no spans
}

// Options configure a RateLimitServer.
type Options struct {
	// Headers adds RateLimit-Limit, -Remaining and -Reset to every response,
	// from the status closest to its limit.
	Headers bool
	// Now is the clock requests are stamped with (nil: time.Now).
	Now func() time.Time
	// Tracer, when set, makes each ShouldRateLimit a span (nil: no tracing,
	// at no cost).
	Tracer trace.Tracer
}

// NewRateLimitServer returns a server answering from d.
func NewRateLimitServer(d Decider, opts Options) *RateLimitServer {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &RateLimitServer{decider: d, now: now, headers: opts.Headers, tracer: opts.Tracer}
}

// ShouldRateLimit answers one request. A malformed request gets
// INVALID_ARGUMENT; a store failure under the "error" policy gets
// UNAVAILABLE, which Envoy resolves with its failure_mode_deny.
//
// With a Tracer, each call is a span (trace.go), the child of the trace
// context in the call's metadata.
func (s *RateLimitServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.tracer != nil {
		return s.shouldRateLimitTraced(ctx, req)
	}
	return s.decide(ctx, req, nil)
}

// decide answers req; tr, when not nil, is filled with what the engine did.
func (s *RateLimitServer) decide(ctx context.Context, req *rlsv3.RateLimitRequest, tr *ratelimit.Trace) (*rlsv3.RateLimitResponse, error) {
	now := s.now()
	ereq, err := Translate(req)
	if err != nil {
		return nil, GRPCError(err)
	}
	ereq.Trace = tr
	resp := responses.Get().(*ratelimit.Response)
	defer responses.Put(resp)
	if err := s.decider.DecideInto(ctx, ereq, now, resp); err != nil {
		return nil, GRPCError(err)
	}
	return Response(resp, s.headers), nil
}

// GRPCError maps an engine error to a gRPC status. The status message is
// the error's text on one line (see oneLine): errors.Join puts a newline
// between its parts, and Envoy logs the message as one line.
func GRPCError(err error) error {
	code := codes.Internal
	// A store failure wraps the store's own error, often a timeout: it is
	// checked first, so it reaches Envoy as UNAVAILABLE (failure_mode_deny
	// decides), not as the caller's own deadline.
	switch {
	case errors.Is(err, ratelimit.ErrInvalidRequest):
		code = codes.InvalidArgument
	case errors.Is(err, ratelimit.ErrStore):
		code = codes.Unavailable
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, oneLine(err.Error()))
}

// oneLine returns msg with its lines joined by "; ", blank lines and the
// spaces around each line dropped; a message of one line is returned as it
// is.
func oneLine(msg string) string {
	if !strings.ContainsAny(msg, "\r\n") {
		return msg
	}
	var b strings.Builder
	for line := range strings.FieldsFuncSeq(msg, func(r rune) bool { return r == '\n' || r == '\r' }) {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}

var unitFromProto = map[rlsv3.RateLimitResponse_RateLimit_Unit]ratelimit.Unit{
	rlsv3.RateLimitResponse_RateLimit_SECOND: ratelimit.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: ratelimit.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   ratelimit.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    ratelimit.Day,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   ratelimit.Week,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  ratelimit.Month,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   ratelimit.Year,
}

var unitToProto = func() map[ratelimit.Unit]rlsv3.RateLimitResponse_RateLimit_Unit {
	m := map[ratelimit.Unit]rlsv3.RateLimitResponse_RateLimit_Unit{}
	for p, u := range unitFromProto {
		m[u] = p
	}
	return m
}()

// Translate turns a RateLimitRequest into the engine's Request. Bounds are
// the engine's to check (Decide reports them as ErrInvalidRequest); this
// only refuses what has no meaning at all, like a nil descriptor.
func Translate(req *rlsv3.RateLimitRequest) (*ratelimit.Request, error) {
	if req == nil {
		return nil, fmt.Errorf("%w: nil request", ratelimit.ErrInvalidRequest)
	}
	out := &ratelimit.Request{Domain: req.GetDomain(), HitsAddend: req.GetHitsAddend()}
	if n := len(req.GetDescriptors()); n > ratelimit.MaxDescriptors {
		// Leave the count to the engine's check, but do not copy thousands.
		out.Descriptors = make([]ratelimit.Descriptor, n)
		return out, nil
	}
	out.Descriptors = make([]ratelimit.Descriptor, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if d == nil {
			return nil, fmt.Errorf("%w: descriptor %d is null", ratelimit.ErrInvalidRequest, i)
		}
		ed := &out.Descriptors[i]
		ed.Entries = make([]ratelimit.Entry, len(d.GetEntries()))
		for j, en := range d.GetEntries() {
			ed.Entries[j] = ratelimit.Entry{Key: en.GetKey(), Value: en.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			v := h.GetValue()
			ed.HitsAddend = &v
		}
		if l := d.GetLimit(); l != nil {
			// envoy.type.v3.RateLimitUnit numbers SECOND..YEAR as the response enum does.
			ed.Override = &ratelimit.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: unitFromProto[rlsv3.RateLimitResponse_RateLimit_Unit(l.GetUnit())]}
		}
		ed.Negative = d.GetIsNegativeHits()
	}
	return out, nil
}

// Response turns the engine's Response into a RateLimitResponse, with the
// RateLimit-* headers when headers is set.
func Response(r *ratelimit.Response, headers bool) *rlsv3.RateLimitResponse {
	out := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_Code(r.Code),
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	for i := range r.Statuses {
		st := &r.Statuses[i]
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(st.Code), LimitRemaining: st.Remaining}
		if st.Limit != nil {
			ds.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name:            st.Limit.Name,
				RequestsPerUnit: st.Limit.RequestsPerUnit,
				Unit:            unitToProto[st.Limit.Unit],
			}
			if st.Limit.UnitMultiplier > 1 {
				ds.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(st.Limit.UnitMultiplier)
			}
			ds.DurationUntilReset = durationpb.New(st.UntilReset)
		}
		out.Statuses[i] = ds
	}
	if headers && r.HeaderStatus >= 0 && r.Statuses[r.HeaderStatus].Limit != nil {
		st := &r.Statuses[r.HeaderStatus]
		window := st.Limit.Unit.Duration() * time.Duration(max(st.Limit.UnitMultiplier, 1))
		reset := int64((st.UntilReset + time.Second - 1) / time.Second)
		out.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: HeaderLimit, Value: strconv.FormatUint(uint64(st.Limit.RequestsPerUnit), 10) + ", " +
				strconv.FormatUint(uint64(st.Limit.RequestsPerUnit), 10) + ";w=" + strconv.FormatInt(int64(window/time.Second), 10)},
			{Key: HeaderRemaining, Value: strconv.FormatUint(uint64(st.Remaining), 10)},
			{Key: HeaderReset, Value: strconv.FormatInt(reset, 10)},
		}
	}
	if r.QuotaMode {
		violations := make([]any, len(r.QuotaViolations))
		for i, v := range r.QuotaViolations {
			violations[i] = float64(v)
		}
		if md, err := structpb.NewStruct(map[string]any{"quotaModeEnabled": true, "quotaModeViolations": violations}); err == nil {
			out.DynamicMetadata = md
		}
	}
	return out
}
