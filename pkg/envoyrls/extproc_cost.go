package envoyrls

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// CostReserver reserves a request's cost limit; *engine.Engine is one.
// ReserveCost returns a nil Reservation, with the Response saying why,
// when the reservation does not fit. Implementations are safe for
// concurrent use.
type CostReserver interface {
	ChooseCost(authority, path string, header func(name string) (string, bool)) (ratelimit.CostChoice, bool)
	ReserveCost(ctx context.Context, req *ratelimit.Request, now time.Time) (ratelimit.Reservation, *ratelimit.Response, error)
}

// HeaderCostLimit names the cost limit that refused a request (429).
const HeaderCostLimit = "x-throttlekit-cost-limit"

// costHold is one stream's reservation, from its request headers to its
// settlement, and the real cost read so far.
type costHold struct {
	name   string
	source ratelimit.CostSource
	res    ratelimit.Reservation
	cost   int64 // the latest cost the source gave; valid when seen
	seen   bool
}

// reserveCost reserves the cost limit the request headers h select, at
// now. It returns the hold (nil when no cost limit applies), or the
// answer refusing the request (429 with retry-after when the reservation
// does not fit, 400 for a request the engine cannot answer), or the error
// ending the stream (the store failed and the rule's on_store_error is
// error: Envoy's failure_mode_allow decides).
func (s *ProcessorServer) reserveCost(ctx context.Context, h headerMap, now time.Time) (*costHold, *extprocv3.ProcessingResponse, error) {
	if s.costs == nil {
		return nil, nil, nil
	}
	choice, ok := s.costs.ChooseCost(h.get(":authority"), h.get(":path"), h.lookup)
	if !ok {
		return nil, nil, nil
	}
	res, resp, err := s.costs.ReserveCost(ctx, &choice.Request, now)
	switch {
	case errors.Is(err, ratelimit.ErrInvalidRequest):
		return nil, immediate(400, "cost limit "+choice.Name+": "+err.Error()+"\n", "throttlekit_cost_invalid", nil), nil
	case err != nil && ctx.Err() != nil: // Envoy went away meanwhile
		return nil, nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		return nil, nil, status.Errorf(codes.Unavailable, "cost limit %s: %v", choice.Name, err)
	case res == nil:
		return nil, rejectCost(choice.Name, resp), nil
	}
	return &costHold{name: choice.Name, source: choice.Source, res: res}, nil, nil
}

// rejectCost answers a request whose reservation does not fit: 429, with
// retry-after (whole seconds, rounded up) when the units would fit.
func rejectCost(name string, resp *ratelimit.Response) *extprocv3.ProcessingResponse {
	var wait time.Duration
	if i := resp.HeaderStatus; i >= 0 && i < len(resp.Statuses) {
		wait = resp.Statuses[i].UntilReset
	}
	retry := int64((wait + time.Second - 1) / time.Second)
	return immediate(429, "cost limit reached: "+name+"\n", "throttlekit_cost_limit", []*corev3.HeaderValueOption{
		headerOption("retry-after", strconv.FormatInt(retry, 10)),
		headerOption(HeaderCostLimit, name),
	})
}

func immediate(code int, body, details string, headers []*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
		Body:    []byte(body),
		Details: details,
	}}}
}

func headerOption(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

// observe reads what req carries of the real cost: the dynamic metadata
// forwarded with any message, the response header or trailer. It reports
// whether the cost is now final (the response's end, or a header or
// trailer source that has been read, present or not). A value that is not
// a whole number of units (garbage, negative, too large) is not taken.
func (c *costHold) observe(req *extprocv3.ProcessingRequest) (final bool) {
	if c.source.Kind == ratelimit.CostFromMetadata {
		if v, ok := metadataCost(req.GetMetadataContext(), c.source.Namespace, c.source.Key); ok {
			c.cost, c.seen = v, true
		}
	}
	switch m := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if c.source.Kind == ratelimit.CostFromResponseHeader {
			c.read(headersOf(m.ResponseHeaders.GetHeaders()))
			return true
		}
		return m.ResponseHeaders.GetEndOfStream()
	case *extprocv3.ProcessingRequest_ResponseBody:
		return m.ResponseBody.GetEndOfStream()
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if c.source.Kind == ratelimit.CostFromResponseTrailer {
			c.read(headersOf(m.ResponseTrailers.GetTrailers()))
		}
		return true
	}
	return false
}

// read takes the cost from a response header or trailer list.
func (c *costHold) read(h headerMap) {
	if v, ok := h.lookup(c.source.Name); ok {
		if n, err := ratelimit.ParseCost(v); err == nil {
			c.cost, c.seen = n, true
		}
	}
}

// metadataCost reads the number at key in namespace ns of md: a Struct
// number (as Envoy AI Gateway writes its token counts) or a decimal
// string.
func metadataCost(md *corev3.Metadata, ns, key string) (int64, bool) {
	v := md.GetFilterMetadata()[ns].GetFields()[key]
	var n int64
	var err error
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		n, err = ratelimit.CostFromNumber(k.NumberValue)
	case *structpb.Value_StringValue:
		n, err = ratelimit.ParseCost(k.StringValue)
	default:
		return 0, false
	}
	return n, err == nil
}

// settle ends the hold at the cost read, or at the reservation when none
// was: a stream that ends without a cost (reset, timeout, client gone)
// keeps what it reserved. ran is false for a request that never reached
// the backend (its gate refused it): it settles at nothing. Settlement
// outlives the stream's context, so a reset stream still settles.
func (s *ProcessorServer) settle(ctx context.Context, c *costHold, ran bool) {
	cost := c.res.Units()
	switch {
	case !ran:
		cost = 0
	case c.seen:
		cost = c.cost
	}
	st, err := c.res.Settle(context.WithoutCancel(ctx), cost, s.now())
	if err != nil {
		s.log.Warn("settling a cost limit's reservation failed", "cost_limit", c.name, "err", err)
	}
	if s.settled != nil {
		s.settled(c.name, st)
	}
}

// discardLogger is the default Logger.
var discardLogger = slog.New(slog.DiscardHandler)
