package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

// Static is a Controller whose limit never moves: the hand-tuned constant
// the adaptive controllers are compared with. It is safe for concurrent use
// (it has no state to change).
type Static struct{ limit int }

var _ adaptive.Controller = (*Static)(nil)

// NewStatic returns a Static holding limit, which must be at least 1.
func NewStatic(limit int) *Static {
	if limit < 1 {
		panic(fmt.Sprintf("sim: NewStatic(%d): limit must be at least 1", limit))
	}
	return &Static{limit: limit}
}

// Observe ignores s and returns the fixed limit.
func (s *Static) Observe(time.Time, adaptive.Sample) int { return s.limit }

// Limit returns the fixed limit.
func (s *Static) Limit() int { return s.limit }

// Name returns "static".
func (s *Static) Name() string { return KindStatic }

// paramError is a problem with one field of a ControllerSpec; field is
// relative to the spec (e.g. params.tolerance).
type paramError struct{ field, msg string }

func (e *paramError) Error() string { return e.field + ": " + e.msg }

// build returns a fresh controller for c; seed seeds any randomness it
// needs (recalibration jitter). Its errors are *paramError when one field is
// at fault.
func (c ControllerSpec) build(seed uint64) (adaptive.Controller, error) {
	rng := func() *rand.Rand {
		h := fnv.New64a()
		h.Write([]byte(c.Name))
		return rand.New(rand.NewPCG(seed, h.Sum64()))
	}
	if c.Kind != KindStatic && c.Limit != 0 {
		return nil, &paramError{"limit", "only a static controller takes limit; adaptive ones take min_limit, max_limit and initial_limit"}
	}
	switch c.Kind {
	case "":
		return nil, &paramError{"kind", "missing: give kind: " + strings.Join(kinds, ", ")}
	case KindStatic:
		switch {
		case c.Limit < 1:
			return nil, &paramError{"limit", fmt.Sprintf("a static controller needs limit ≥ 1, not %d", c.Limit)}
		case c.MinLimit != 0 || c.MaxLimit != 0 || c.InitialLimit != 0 || len(c.Params) > 0:
			return nil, &paramError{"limit", "a static controller takes only limit (no min_limit, max_limit, initial_limit or params)"}
		}
		return NewStatic(c.Limit), nil
	case KindGradient2, KindAIMD, KindP95, KindVegas:
		params := make(map[string]string, len(c.Params))
		for k, p := range c.Params {
			params[k] = p.Value
		}
		ctl, err := adaptive.NewNamed(c.Kind, adaptive.Limits{Min: c.MinLimit, Max: c.MaxLimit, Initial: c.InitialLimit}, params, rng())
		var pe *adaptive.ParamError
		if errors.As(err, &pe) {
			return nil, &paramError{"params." + pe.Param, pe.Msg}
		}
		return ctl, err
	}
	return nil, &paramError{"kind", fmt.Sprintf("unknown kind %q; the kinds are %s", c.Kind, strings.Join(kinds, ", "))}
}
