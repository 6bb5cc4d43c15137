package adaptive

import (
	"fmt"
	"math"
	"time"
)

// AIMDConfig configures an AIMD controller. Zero fields take the documented
// defaults.
type AIMDConfig struct {
	// MinLimit, MaxLimit and InitialLimit bound and start the limit; 0 means
	// DefaultMinLimit, DefaultMaxLimit and DefaultInitialLimit.
	MinLimit, MaxLimit, InitialLimit int
	// Increase is added to the limit per good sample. 0 means 1.
	Increase int
	// Backoff multiplies the limit on a bad sample, in (0, 1). 0 means 0.9.
	Backoff float64
	// Timeout is the RTT above which even an OK sample is bad. 0 means 5s.
	Timeout time.Duration
	// MinUtilization: a sample admitted with Inflight < limit·MinUtilization
	// cannot raise the limit. 0 means 0.5; a negative value disables the
	// guard.
	MinUtilization float64
}

// Defaults for AIMDConfig's zero fields.
const (
	DefaultAIMDIncrease = 1
	DefaultAIMDBackoff  = 0.9
	DefaultAIMDTimeout  = 5 * time.Second
)

// AIMD is additive increase, multiplicative decrease: a good sample (OK, RTT
// ≤ Timeout, admitted near the limit) adds Increase; a bad one (Error,
// Timeout, Dropped, or RTT > Timeout) multiplies the limit by Backoff,
// rounding down, so it always shrinks by at least one until MinLimit.
//
// An AIMD is not safe for concurrent use; see Controller.
type AIMD struct {
	b        bounds
	increase int
	backoff  float64
	timeout  time.Duration
	minUtil  float64
	limit    int // Invariant: b.min ≤ limit ≤ b.max
}

// NewAIMD returns an AIMD controller for c.
func NewAIMD(c AIMDConfig) (*AIMD, error) {
	const name = "aimd"
	b, err := resolveBounds(name, c.MinLimit, c.MaxLimit, c.InitialLimit)
	if err != nil {
		return nil, err
	}
	if c.Increase == 0 {
		c.Increase = DefaultAIMDIncrease
	}
	if c.Backoff == 0 {
		c.Backoff = DefaultAIMDBackoff
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultAIMDTimeout
	}
	if c.MinUtilization == 0 {
		c.MinUtilization = DefaultMinUtilization
	}
	switch {
	case c.Increase < 0:
		return nil, fmt.Errorf("adaptive: %s: Increase %d is negative", name, c.Increase)
	case c.Timeout < 0:
		return nil, fmt.Errorf("adaptive: %s: Timeout %v is negative", name, c.Timeout)
	case !(c.Backoff > 0 && c.Backoff < 1):
		return nil, fmt.Errorf("adaptive: %s: Backoff %v outside (0, 1)", name, c.Backoff)
	}
	if err := checkFrac(name, "MinUtilization", c.MinUtilization, math.Inf(-1), 1); err != nil {
		return nil, err
	}
	return &AIMD{b: b, increase: c.Increase, backoff: c.Backoff, timeout: c.Timeout, minUtil: c.MinUtilization, limit: b.initial}, nil
}

// Name returns "aimd".
func (*AIMD) Name() string { return "aimd" }

// Limit returns the limit now in force.
func (a *AIMD) Limit() int { return a.limit }

// Observe folds s in and returns the limit now in force. AIMD ignores now.
func (a *AIMD) Observe(_ time.Time, s Sample) int {
	switch {
	case s.Outcome != OK || s.RTT > a.timeout:
		a.limit = a.b.clamp(int(float64(a.limit) * a.backoff))
	case utilized(s.Inflight, a.limit, a.minUtil):
		a.limit = a.b.clamp(a.limit + a.increase)
	}
	return a.limit
}
