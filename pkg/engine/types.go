package engine

import (
	"context"
	"errors"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// The engine's request, response and trace, its gate and cost choices:
// package ratelimit's types, named here too so the engine's callers need
// not import both. The adapters speak ratelimit only.
type (
	Request        = ratelimit.Request
	Descriptor     = ratelimit.Descriptor
	Entry          = ratelimit.Entry
	Override       = ratelimit.Override
	Trace          = ratelimit.Trace
	TracedLimit    = ratelimit.TracedLimit
	RuleRef        = ratelimit.RuleRef
	Code           = ratelimit.Code
	Status         = ratelimit.Status
	LimitInfo      = ratelimit.LimitInfo
	Response       = ratelimit.Response
	GateChoice     = ratelimit.GateChoice
	Held           = ratelimit.Held
	CostSourceKind = ratelimit.CostSourceKind
	CostSource     = ratelimit.CostSource
	CostChoice     = ratelimit.CostChoice
	Settlement     = ratelimit.Settlement
)

// The verdicts (ratelimit's).
const (
	CodeUnknown   = ratelimit.CodeUnknown
	CodeOK        = ratelimit.CodeOK
	CodeOverLimit = ratelimit.CodeOverLimit
)

// The sources of a real cost (ratelimit's).
const (
	CostFromResponseHeader  = ratelimit.CostFromResponseHeader
	CostFromResponseTrailer = ratelimit.CostFromResponseTrailer
	CostFromMetadata        = ratelimit.CostFromMetadata
)

// Bounds on a request (ratelimit's); beyond them it is rejected with
// ErrInvalidRequest.
const (
	MaxDomainBytes = ratelimit.MaxDomainBytes
	MaxDescriptors = ratelimit.MaxDescriptors
	MaxEntries     = ratelimit.MaxEntries
	MaxKeyBytes    = ratelimit.MaxKeyBytes
	MaxValueBytes  = ratelimit.MaxValueBytes
)

// ratelimit.MaxUnits is gale.MaxLimit: each array length below is
// negative, and the build fails, if they part.
var (
	_ [gale.MaxLimit - ratelimit.MaxUnits]struct{}
	_ [ratelimit.MaxUnits - gale.MaxLimit]struct{}
)

// ErrInvalidRequest is ratelimit.ErrInvalidRequest: wrapped by every error
// Decide returns for a request that cannot be answered as sent.
var ErrInvalidRequest = ratelimit.ErrInvalidRequest

// ErrBadCost is ratelimit.ErrBadCost: wrapped by ParseCost and
// CostFromNumber for a value that is not a cost.
var ErrBadCost = ratelimit.ErrBadCost

// ParseCost is ratelimit.ParseCost: a cost as a header or trailer carries
// it.
func ParseCost(s string) (int64, error) { return ratelimit.ParseCost(s) }

// CostFromNumber is ratelimit.CostFromNumber: a cost carried as a protobuf
// number.
func CostFromNumber(v float64) (int64, error) { return ratelimit.CostFromNumber(v) }

// storeFailure is a store's error (wrapping gale.ErrStore) as the engine
// returns it: it wraps ratelimit.ErrStore too, for callers that do not
// import gale, and reads as the store's error did.
type storeFailure struct{ err error }

func (f storeFailure) Error() string   { return f.err.Error() }
func (f storeFailure) Unwrap() []error { return []error{f.err, ratelimit.ErrStore} }

// asStoreFailure marks err as a store failure when it wraps gale.ErrStore;
// any other error is returned as it is.
func asStoreFailure(err error) error {
	if errors.Is(err, gale.ErrStore) {
		return storeFailure{err}
	}
	return err
}

// ReserveCost is Reserve, its reservation seen as a ratelimit.Reservation
// (nil when refused): what an adapter that knows only package ratelimit
// calls.
func (e *Engine) ReserveCost(ctx context.Context, req *Request, now time.Time) (ratelimit.Reservation, *Response, error) {
	res, resp, err := e.Reserve(ctx, req, now)
	if res == nil {
		return nil, resp, err
	}
	return res, resp, err
}

var _ ratelimit.Reservation = (*Reservation)(nil)
