// Package gale is throttlekit's rate-limit engine: pure strategies (fixed
// window, sliding window, GCRA, token bucket, calendar quota), the Store
// contract for the shared tier (L2), and the two-tier Limiter with its strict,
// cached-deny and leased modes.
//
// Nothing here knows about Envoy, gRPC, YAML or Prometheus. Time is always a
// parameter: strategies take `now`, the Limiter takes `now` per check and a
// clock.Clock only for its background timers.
package gale

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm names a strategy.
type Algorithm uint8

// The strategies. Their numbers are part of the Redis store's script
// arguments: never renumber them.
const (
	// FixedWindow counts units in windows [k·Period, (k+1)·Period) of Unix time.
	FixedWindow Algorithm = 1
	// SlidingWindow estimates the last Period with two fixed windows: the
	// previous window's count weighted by how much of it still overlaps, plus
	// the current count.
	SlidingWindow Algorithm = 2
	// GCRA is the generic cell rate algorithm: Limit per Period with a burst
	// tolerance of Burst units, stored as one theoretical arrival time.
	GCRA Algorithm = 3
	// TokenBucket holds up to Burst tokens and refills Limit per Period.
	TokenBucket Algorithm = 4
	// Quota is a budget of Limit per calendar period (UTC day, ISO week from
	// Monday, month or year), resetting at the calendar boundary.
	Quota Algorithm = 5
)

var algorithmNames = map[Algorithm]string{
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	GCRA:          "gcra",
	TokenBucket:   "token_bucket",
	Quota:         "quota",
}

func (a Algorithm) String() string {
	if n, ok := algorithmNames[a]; ok {
		return n
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm whose String is name.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a, n := range algorithmNames {
		if n == name {
			return a, nil
		}
	}
	return 0, fmt.Errorf("gale: unknown algorithm %q (want fixed_window, sliding_window, gcra, token_bucket or quota)", name)
}

// Calendar is the period of a Quota.
type Calendar uint8

// Calendar periods, all in UTC. Their numbers are part of the Redis store's
// script arguments.
const (
	Day   Calendar = 1
	Week  Calendar = 2 // ISO week: Monday 00:00 to Monday 00:00
	Month Calendar = 3
	Year  Calendar = 4
)

func (c Calendar) String() string {
	switch c {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// Bounds on rule parameters. With instants before 2255 (Unix µs below 2^53)
// they keep every instant the strategies compute exact in float64, and so in
// Redis's Lua, whose numbers are doubles: a window, or a bucket's fill time
// (Burst·Period/Limit), is at most MaxPeriod.
const (
	MaxLimit  = 1 << 40
	MaxPeriod = 10 * 366 * 24 * time.Hour
)

// Rule is one limit: how many units per what period, by which strategy. The
// zero value is invalid; Validate says why. A Rule is a small value: pass it
// by value.
type Rule struct {
	Algorithm Algorithm
	// Limit is the number of units per Period (per calendar period for Quota).
	Limit int64
	// Period is the window length (fixed and sliding window) or the time in
	// which Limit units drain (GCRA, token bucket). At least a microsecond;
	// whole microseconds only. Unused by Quota.
	Period time.Duration
	// Burst is the bucket capacity of GCRA and the token bucket; 0 means
	// Limit. Unused by the window strategies.
	Burst int64
	// Calendar is Quota's period; unused by the others.
	Calendar Calendar
}

// ErrInvalidRule is wrapped by every error Validate returns.
var ErrInvalidRule = errors.New("gale: invalid rule")

// Validate reports whether r can be enforced.
func (r Rule) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRule, fmt.Sprintf(format, args...))
	}
	if _, ok := algorithmNames[r.Algorithm]; !ok {
		return bad("unknown algorithm %d", r.Algorithm)
	}
	if r.Limit < 1 || r.Limit > MaxLimit {
		return bad("limit %d is outside 1..%d", r.Limit, int64(MaxLimit))
	}
	if r.Algorithm == Quota {
		if r.Calendar < Day || r.Calendar > Year {
			return bad("quota needs a calendar period (day, week, month or year)")
		}
		if r.Period != 0 || r.Burst != 0 {
			return bad("quota takes a calendar period, not a period or a burst")
		}
		return nil
	}
	if r.Calendar != 0 {
		return bad("only quota takes a calendar period")
	}
	if r.Period < time.Microsecond || r.Period > MaxPeriod {
		return bad("period %v is outside 1µs..%v", r.Period, MaxPeriod)
	}
	if r.Period%time.Microsecond != 0 {
		return bad("period %v is not a whole number of microseconds", r.Period)
	}
	switch r.Algorithm {
	case GCRA, TokenBucket:
		if r.Burst < 0 || r.Burst > MaxLimit {
			return bad("burst %d is outside 0..%d", r.Burst, int64(MaxLimit))
		}
		// The time an empty bucket takes to fill: every instant the strategy
		// computes lies within it of now, so it must fit the period bound too.
		fill := float64(r.Capacity()) * float64(r.Period) / float64(r.Limit)
		if fill > float64(MaxPeriod) {
			return bad("burst %d at %d per %v takes %v to refill, above %v", r.Capacity(), r.Limit, r.Period, time.Duration(fill), MaxPeriod)
		}
	default:
		if r.Burst != 0 {
			return bad("%v takes no burst", r.Algorithm)
		}
	}
	return nil
}

// Capacity is the most units the rule can ever admit at once: Burst (or
// Limit) for the buckets, Limit for the windows. A cost above it is never
// admitted.
func (r Rule) Capacity() int64 {
	if (r.Algorithm == GCRA || r.Algorithm == TokenBucket) && r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// Windowed reports whether the strategy has discrete window boundaries, so
// that leased credits can be coupled to the window that granted them. GCRA and
// the token bucket are pure rates and lease without coupling.
func (r Rule) Windowed() bool {
	switch r.Algorithm {
	case FixedWindow, SlidingWindow, Quota:
		return true
	}
	return false
}

func (r Rule) String() string {
	switch r.Algorithm {
	case Quota:
		return fmt.Sprintf("%v %d/%v", r.Algorithm, r.Limit, r.Calendar)
	case GCRA, TokenBucket:
		return fmt.Sprintf("%v %d/%v burst %d", r.Algorithm, r.Limit, r.Period, r.Capacity())
	}
	return fmt.Sprintf("%v %d/%v", r.Algorithm, r.Limit, r.Period)
}
