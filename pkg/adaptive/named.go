package adaptive

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kinds are the controllers NewNamed builds, by name.
var Kinds = []string{"gradient2", "aimd", "p95", "vegas"}

// Limits bound a controller's limit; 0 means the controller's default.
type Limits struct{ Min, Max, Initial int }

// ParamError is NewNamed's error for one parameter: which one, and what is
// wrong with it. Callers that know where the parameter was written (a policy
// or scenario file) add the place.
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Msg }

// NewNamed builds the controller kind (one of Kinds) within limits from
// named parameters written as text: numbers, whole numbers and Go durations,
// named as policy and scenario files name them (tolerance, rtt_window,
// target, tick, recalibration_interval, …; ParamNames lists each kind's).
// rng drives recalibration jitter; nil means a fixed seed. An unknown or
// unparsable parameter gives a *ParamError; a value the controller refuses
// gives its constructor's error.
func NewNamed(kind string, l Limits, params map[string]string, rng *rand.Rand) (Controller, error) {
	if rng == nil {
		rng = rand.New(rand.NewPCG(1, 2))
	}
	switch kind {
	case "gradient2":
		c := Gradient2Config{MinLimit: l.Min, MaxLimit: l.Max, InitialLimit: l.Initial}
		if err := bind(kind, params, gradient2Params(&c, rng)); err != nil {
			return nil, err
		}
		return NewGradient2(c)
	case "aimd":
		c := AIMDConfig{MinLimit: l.Min, MaxLimit: l.Max, InitialLimit: l.Initial}
		if err := bind(kind, params, aimdParams(&c, rng)); err != nil {
			return nil, err
		}
		return NewAIMD(c)
	case "p95":
		c := P95Config{MinLimit: l.Min, MaxLimit: l.Max, InitialLimit: l.Initial}
		if err := bind(kind, params, p95Params(&c)); err != nil {
			return nil, err
		}
		return NewP95(c)
	case "vegas":
		c := VegasConfig{MinLimit: l.Min, MaxLimit: l.Max, InitialLimit: l.Initial}
		if err := bind(kind, params, vegasParams(&c, rng)); err != nil {
			return nil, err
		}
		return NewVegas(c)
	}
	return nil, fmt.Errorf("adaptive: unknown controller %q (want %s)", kind, strings.Join(Kinds, ", "))
}

// ParamNames lists the parameters kind takes, sorted; nil for an unknown kind.
func ParamNames(kind string) []string {
	var m map[string]setter
	rng := rand.New(rand.NewPCG(1, 2))
	switch kind {
	case "gradient2":
		m = gradient2Params(&Gradient2Config{}, rng)
	case "aimd":
		m = aimdParams(&AIMDConfig{}, rng)
	case "p95":
		m = p95Params(&P95Config{})
	case "vegas":
		m = vegasParams(&VegasConfig{}, rng)
	default:
		return nil
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// setter parses one parameter's text into a config field.
type setter struct {
	set  func(v string) error
	help string // what the value must be, for the error
}

// maxIntParam bounds whole-number parameters: some size buffers
// (rtt_window, max_samples), and no sensible value comes near it.
const maxIntParam = 1_000_000

func floatParam(dst *float64) setter {
	return setter{help: "a number", set: func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err == nil {
			*dst = x
		}
		return err
	}}
}

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

// bind sets each parameter through the setter of its name, in name order so
// that the error reported first is stable.
func bind(kind string, params map[string]string, setters map[string]setter) error {
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
			return &ParamError{n, fmt.Sprintf("%s has no parameter %q; its parameters are %s", kind, n, strings.Join(known, ", "))}
		}
		if err := s.set(params[n]); err != nil {
			return &ParamError{n, fmt.Sprintf("must be %s, not %q", s.help, params[n])}
		}
	}
	return nil
}

func gradient2Params(c *Gradient2Config, rng *rand.Rand) map[string]setter {
	m := map[string]setter{
		"tolerance":       floatParam(&c.Tolerance),
		"rtt_window":      intParam(&c.RTTWindow),
		"smoothing":       floatParam(&c.Smoothing),
		"min_utilization": floatParam(&c.MinUtilization),
	}
	recalibrationParams(m, &c.Recalibration, rng)
	return m
}

func aimdParams(c *AIMDConfig, rng *rand.Rand) map[string]setter {
	m := map[string]setter{
		"increase":        intParam(&c.Increase),
		"backoff":         floatParam(&c.Backoff),
		"timeout":         durationParam(&c.Timeout),
		"tolerance":       floatParam(&c.Tolerance),
		"rtt_window":      intParam(&c.RTTWindow),
		"min_utilization": floatParam(&c.MinUtilization),
	}
	recalibrationParams(m, &c.Recalibration, rng)
	return m
}

func p95Params(c *P95Config) map[string]setter {
	return map[string]setter{
		"target": durationParam(&c.Target),
		"signal": {help: "p95 or ewma", set: func(v string) error {
			switch v {
			case "p95":
				c.Signal = SignalP95
			case "ewma":
				c.Signal = SignalEWMA
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

func vegasParams(c *VegasConfig, rng *rand.Rand) map[string]setter {
	m := map[string]setter{
		"rtt_window":      intParam(&c.RTTWindow),
		"min_utilization": floatParam(&c.MinUtilization),
	}
	recalibrationParams(m, &c.Recalibration, rng)
	return m
}

// recalibrationParams adds minRTT recalibration's parameters to m; its
// jitter is drawn from rng.
func recalibrationParams(m map[string]setter, r *Recalibration, rng *rand.Rand) {
	m["recalibration_interval"] = setter{help: "a duration such as 30s, or off", set: func(v string) error {
		if v == "off" {
			r.Interval = -1
			return nil
		}
		d, err := time.ParseDuration(v)
		if err == nil && d <= 0 {
			err = errors.New("not positive")
		}
		if err == nil {
			r.Interval, r.Rand = d, rng
		}
		return err
	}}
	m["recalibration_jitter"] = durationParam(&r.Jitter)
	m["recalibration_limit"] = intParam(&r.Limit)
	m["recalibration_requests"] = intParam(&r.RequestCount)
}
