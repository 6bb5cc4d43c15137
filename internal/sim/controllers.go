package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
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

// setter parses one parameter's value into a config field.
type setter struct {
	set  func(v string) error
	help string // what the value is, for the error
}

func floatParam(dst *float64) setter {
	return setter{help: "a number", set: func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err == nil {
			*dst = x
		}
		return err
	}}
}

// maxIntParam bounds whole-number parameters: some size buffers
// (rtt_window, max_samples), and no sensible value comes near it.
const maxIntParam = 1_000_000

func intParam(dst *int) setter {
	return setter{help: fmt.Sprintf("a whole number no larger than %d", maxIntParam), set: func(v string) error {
		x, err := strconv.Atoi(v)
		if err == nil && x > maxIntParam {
			err = errors.New("too large")
		}
		if err == nil {
			*dst = x
		}
		return err
	}}
}

func durationParam(dst *time.Duration) setter {
	return setter{help: "a duration such as 100ms", set: func(v string) error {
		d, err := time.ParseDuration(v)
		if err == nil {
			*dst = d
		}
		return err
	}}
}

// bind sets each of params through the setter of its name, in name order so
// that the first error reported is stable.
func bind(kind string, params map[string]Param, setters map[string]setter) error {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		s, ok := setters[n]
		if !ok {
			known := make([]string, 0, len(setters))
			for k := range setters {
				known = append(known, k)
			}
			slices.Sort(known)
			return &paramError{"params." + n, fmt.Sprintf("%s has no parameter %q; its parameters are %s", kind, n, strings.Join(known, ", "))}
		}
		if err := s.set(params[n].Value); err != nil {
			return &paramError{"params." + n, fmt.Sprintf("must be %s, not %q", s.help, params[n].Value)}
		}
	}
	return nil
}

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
	case KindGradient2:
		cfg := adaptive.Gradient2Config{MinLimit: c.MinLimit, MaxLimit: c.MaxLimit, InitialLimit: c.InitialLimit}
		if err := bind(c.Kind, c.Params, gradient2Params(&cfg, rng)); err != nil {
			return nil, err
		}
		return adaptive.NewGradient2(cfg)
	case KindAIMD:
		cfg := adaptive.AIMDConfig{MinLimit: c.MinLimit, MaxLimit: c.MaxLimit, InitialLimit: c.InitialLimit}
		if err := bind(c.Kind, c.Params, aimdParams(&cfg)); err != nil {
			return nil, err
		}
		return adaptive.NewAIMD(cfg)
	case KindP95:
		cfg := adaptive.P95Config{MinLimit: c.MinLimit, MaxLimit: c.MaxLimit, InitialLimit: c.InitialLimit}
		if err := bind(c.Kind, c.Params, p95Params(&cfg)); err != nil {
			return nil, err
		}
		return adaptive.NewP95(cfg)
	case KindVegas:
		cfg := adaptive.VegasConfig{MinLimit: c.MinLimit, MaxLimit: c.MaxLimit, InitialLimit: c.InitialLimit}
		if err := bind(c.Kind, c.Params, vegasParams(&cfg, rng)); err != nil {
			return nil, err
		}
		return adaptive.NewVegas(cfg)
	}
	return nil, &paramError{"kind", fmt.Sprintf("unknown kind %q; the kinds are %s", c.Kind, strings.Join(kinds, ", "))}
}

// The parameter names of each controller, mapped onto its config. They are
// the names a policy file's concurrency params use (pkg/engine), and are
// documented in config/scenarios/README.md.

func gradient2Params(c *adaptive.Gradient2Config, rng func() *rand.Rand) map[string]setter {
	m := map[string]setter{
		"tolerance":       floatParam(&c.Tolerance),
		"rtt_window":      intParam(&c.RTTWindow),
		"smoothing":       floatParam(&c.Smoothing),
		"min_utilization": floatParam(&c.MinUtilization),
	}
	recalibrationParams(m, &c.Recalibration, rng)
	return m
}

func aimdParams(c *adaptive.AIMDConfig) map[string]setter {
	return map[string]setter{
		"increase":        intParam(&c.Increase),
		"backoff":         floatParam(&c.Backoff),
		"timeout":         durationParam(&c.Timeout),
		"min_utilization": floatParam(&c.MinUtilization),
	}
}

func p95Params(c *adaptive.P95Config) map[string]setter {
	return map[string]setter{
		"target": durationParam(&c.Target),
		"signal": {help: "p95 or ewma", set: func(v string) error {
			switch v {
			case "p95":
				c.Signal = adaptive.SignalP95
			case "ewma":
				c.Signal = adaptive.SignalEWMA
			default:
				return errors.New("bad signal")
			}
			return nil
		}},
		"tolerance":         floatParam(&c.Tolerance),
		"increase_step":     intParam(&c.IncreaseStep),
		"decrease_factor":   floatParam(&c.DecreaseFactor),
		"max_decrease_step": intParam(&c.MaxDecreaseStep),
		"window":            durationParam(&c.Window),
		"max_samples":       intParam(&c.MaxSamples),
		"min_samples":       intParam(&c.MinSamples),
		"tick":              durationParam(&c.TickInterval),
		"cooldown":          durationParam(&c.Cooldown),
		"max_error_rate":    floatParam(&c.MaxErrorRate),
		"ewma_alpha":        floatParam(&c.EWMAAlpha),
		"min_utilization":   floatParam(&c.MinUtilization),
	}
}

func vegasParams(c *adaptive.VegasConfig, rng func() *rand.Rand) map[string]setter {
	m := map[string]setter{
		"rtt_window":      intParam(&c.RTTWindow),
		"min_utilization": floatParam(&c.MinUtilization),
	}
	recalibrationParams(m, &c.Recalibration, rng)
	return m
}

// recalibrationParams adds the minRTT recalibration parameters to m. The
// jitter is drawn from rng(), seeded from the scenario so runs repeat.
func recalibrationParams(m map[string]setter, r *adaptive.Recalibration, rng func() *rand.Rand) {
	m["recalibration_interval"] = durationParam(&r.Interval)
	m["recalibration_jitter"] = setter{help: "a duration such as 100ms", set: func(v string) error {
		d, err := time.ParseDuration(v)
		if err == nil {
			r.Jitter, r.Rand = d, rng()
		}
		return err
	}}
	m["recalibration_limit"] = intParam(&r.Limit)
	m["recalibration_requests"] = intParam(&r.RequestCount)
}
