package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// CostSourceKind says where a request's real cost is read.
type CostSourceKind uint8

// The sources of a real cost.
const (
	CostFromResponseHeader CostSourceKind = iota + 1
	CostFromResponseTrailer
	CostFromMetadata
)

// CostSource is where a request's real cost is read at the end of its
// response: the response header or trailer Name (lower case), or the
// number at Key in the dynamic metadata namespace Namespace.
type CostSource struct {
	Kind           CostSourceKind
	Name           string
	Namespace, Key string
}

// CostChoice is the cost limit a request matched: the request its
// reservation is taken as, and where its real cost is read at the end.
type CostChoice struct {
	// Name is the cost limit's name.
	Name string
	// Request is the reservation: the cost limit's domain and the one
	// descriptor built from the request's headers, its HitsAddend the
	// units to reserve (1..the cost limit's cap). Pass it to Reserve.
	Request Request
	// Cap is the most a request of this cost limit reserves.
	Cap    int64
	Source CostSource
}

// Reservation is units a request took from its limits before it ran,
// waiting to be settled at its real cost (*engine.Reservation is one).
// Implementations are safe for concurrent use; a Settle after the first
// does nothing.
type Reservation interface {
	// Units is what the reservation holds.
	Units() int64
	// Settle ends the reservation at the request's actual cost at now.
	Settle(ctx context.Context, actual int64, now time.Time) (Settlement, error)
}

// Settlement is what Settle did, in units.
type Settlement struct {
	// Refunded is what went back (reserved − actual), 0 when the real cost
	// was at least the reservation.
	Refunded int64
	// Extra is what was charged beyond the reservation (actual − reserved).
	Extra int64
	// Over is true when the extra charge took a limit past its limit.
	Over bool
}

// ErrBadCost is wrapped by ParseCost and CostFromNumber for a value that is
// not a cost: not a whole number, negative, or above MaxUnits.
var ErrBadCost = errors.New("not a cost")

// ParseCost reads a cost as a header or trailer carries it: decimal digits
// (no sign), optionally surrounded by spaces or tabs, at most MaxUnits.
// Anything else is refused with an error wrapping ErrBadCost: garbage, a
// negative number, a fraction, an overflow.
func ParseCost(s string) (int64, error) {
	t := strings.Trim(s, " \t")
	if t == "" {
		return 0, fmt.Errorf("%w: empty", ErrBadCost)
	}
	var n int64
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not a whole number of units", ErrBadCost, clip(s))
		}
		n = n*10 + int64(c-'0')
		if n > MaxUnits {
			return 0, fmt.Errorf("%w: %q is above %d", ErrBadCost, clip(s), int64(MaxUnits))
		}
	}
	return n, nil
}

// CostFromNumber reads a cost carried as a protobuf number (a Struct
// value, as Envoy AI Gateway writes its token counts): a finite whole
// number from 0 to MaxUnits; anything else is refused with an error
// wrapping ErrBadCost.
func CostFromNumber(v float64) (int64, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxUnits || v != math.Trunc(v) {
		return 0, fmt.Errorf("%w: %v is not a whole number from 0 to %d", ErrBadCost, v, int64(MaxUnits))
	}
	return int64(v), nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
