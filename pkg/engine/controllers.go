package engine

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// binder reads a gate's params into a controller's configuration, reporting
// unparsable and unknown parameters with where they were written.
type binder struct {
	spec  *policy.Gate
	known []string
	errs  policy.Errors
}

func (b *binder) take(name string) (policy.Param, bool) {
	b.known = append(b.known, name)
	p, ok := b.spec.Params[name]
	return p, ok
}

func (b *binder) fail(p policy.Param, name, want string) {
	b.errs = append(b.errs, &policy.Error{Pos: p.Pos, Field: "concurrency.params." + name,
		Msg: fmt.Sprintf("%s must be %s, not %q", name, want, p.Value)})
}

func (b *binder) float(name string, dst *float64) {
	if p, ok := b.take(name); ok {
		v, err := strconv.ParseFloat(p.Value, 64)
		if err != nil || v < 0 {
			b.fail(p, name, "a non-negative number")
			return
		}
		*dst = v
	}
}

func (b *binder) int(name string, dst *int) {
	if p, ok := b.take(name); ok {
		v, err := strconv.Atoi(p.Value)
		if err != nil || v < 0 {
			b.fail(p, name, "a whole number")
			return
		}
		*dst = v
	}
}

func (b *binder) dur(name string, dst *time.Duration) {
	if p, ok := b.take(name); ok {
		v, err := time.ParseDuration(p.Value)
		if err != nil || v < 0 {
			b.fail(p, name, "a Go duration such as 150ms")
			return
		}
		*dst = v
	}
}

func (b *binder) recalibration(dst *adaptive.Recalibration) {
	b.dur("recalibration_interval", &dst.Interval)
	b.dur("recalibration_jitter", &dst.Jitter)
	b.int("recalibration_limit", &dst.Limit)
	b.int("recalibration_requests", &dst.RequestCount)
	if dst.Interval > 0 {
		h := fnv.New64a()
		h.Write([]byte(b.spec.Name))
		dst.Rand = rand.New(rand.NewPCG(h.Sum64(), 0x5eed))
	}
}

// unknown reports every param the controller does not take.
func (b *binder) unknown() {
	for name, p := range b.spec.Params {
		if !slices.Contains(b.known, name) {
			sorted := slices.Clone(b.known)
			slices.Sort(sorted)
			b.errs = append(b.errs, &policy.Error{Pos: p.Pos, Field: "concurrency.params." + name,
				Msg: fmt.Sprintf("%s takes no parameter %q (it takes %s)", b.spec.Controller, name, strings.Join(sorted, ", "))})
		}
	}
}

// newController builds a gate's controller from its policy.
func newController(spec *policy.Gate) (adaptive.Controller, policy.Errors) {
	b := &binder{spec: spec}
	var ctl adaptive.Controller
	var err error
	switch spec.Controller {
	case "aimd":
		c := adaptive.AIMDConfig{MinLimit: spec.MinLimit, MaxLimit: spec.MaxLimit, InitialLimit: spec.InitialLimit}
		b.int("increase", &c.Increase)
		b.float("backoff", &c.Backoff)
		b.dur("timeout", &c.Timeout)
		b.float("min_utilization", &c.MinUtilization)
		if b.unknown(); b.errs == nil {
			ctl, err = adaptive.NewAIMD(c)
		}
	case "p95":
		c := adaptive.P95Config{MinLimit: spec.MinLimit, MaxLimit: spec.MaxLimit, InitialLimit: spec.InitialLimit}
		b.dur("target", &c.Target)
		if p, ok := b.take("signal"); ok {
			switch p.Value {
			case "p95":
			case "ewma":
				c.Signal = adaptive.SignalEWMA
			default:
				b.fail(p, "signal", "p95 or ewma")
			}
		}
		b.float("tolerance", &c.Tolerance)
		b.int("increase_step", &c.IncreaseStep)
		b.float("decrease_factor", &c.DecreaseFactor)
		b.int("max_decrease_step", &c.MaxDecreaseStep)
		b.dur("window", &c.Window)
		b.int("max_samples", &c.MaxSamples)
		b.int("min_samples", &c.MinSamples)
		b.dur("tick", &c.TickInterval)
		b.dur("cooldown", &c.Cooldown)
		b.float("max_error_rate", &c.MaxErrorRate)
		b.float("ewma_alpha", &c.EWMAAlpha)
		b.float("min_utilization", &c.MinUtilization)
		if b.unknown(); b.errs == nil {
			ctl, err = adaptive.NewP95(c)
		}
	case "vegas":
		c := adaptive.VegasConfig{MinLimit: spec.MinLimit, MaxLimit: spec.MaxLimit, InitialLimit: spec.InitialLimit}
		b.int("rtt_window", &c.RTTWindow)
		b.float("min_utilization", &c.MinUtilization)
		b.recalibration(&c.Recalibration)
		if b.unknown(); b.errs == nil {
			ctl, err = adaptive.NewVegas(c)
		}
	default: // gradient2, the default
		c := adaptive.Gradient2Config{MinLimit: spec.MinLimit, MaxLimit: spec.MaxLimit, InitialLimit: spec.InitialLimit}
		b.float("tolerance", &c.Tolerance)
		b.int("rtt_window", &c.RTTWindow)
		b.float("smoothing", &c.Smoothing)
		b.float("min_utilization", &c.MinUtilization)
		b.recalibration(&c.Recalibration)
		if b.unknown(); b.errs == nil {
			ctl, err = adaptive.NewGradient2(c)
		}
	}
	if b.errs != nil {
		return nil, b.errs
	}
	if err != nil {
		return nil, policy.Errors{{Pos: spec.Pos, Field: "concurrency", Msg: err.Error()}}
	}
	return ctl, nil
}
