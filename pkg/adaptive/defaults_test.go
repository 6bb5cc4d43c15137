package adaptive

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestAIMDThresholdIsRelative: by default AIMD calls a sample bad when its
// RTT is above 1.7 × the no-load RTT, so the threshold fits the backend:
// on a 40ms backend an 80ms answer is congestion (the old absolute 5s
// default never fired before a client's own timeout), and the cut is the
// deeper the further past the threshold.
func TestAIMDThresholdIsRelative(t *testing.T) {
	a := must(NewAIMD(AIMDConfig{MaxLimit: 100, InitialLimit: 20}))
	now := t0
	prime(t, a, &now) // no-load 40ms
	if got := a.(*AIMD).OverdueAfter(); got != 68*time.Millisecond {
		t.Fatalf("threshold %v, want 1.7 × 40ms = 68ms", got)
	}
	feed(a, &now, 20, 10*time.Millisecond, 65*time.Millisecond, OK) // a round trip: 20 answers, each admitted at the limit
	if a.Limit() != 21 {
		t.Fatalf("limit %d after a round trip of 65ms answers at the limit, want 21", a.Limit())
	}
	feed(a, &now, 1, 10*time.Millisecond, 80*time.Millisecond, OK)
	if a.Limit() != 17 {
		t.Fatalf("limit %d after an 80ms answer, want 21 × 68/80 = 17", a.Limit())
	}
	// An absolute Timeout keeps the old meaning.
	abs := must(NewAIMD(AIMDConfig{MaxLimit: 100, InitialLimit: 20, Timeout: time.Second}))
	feed(abs, &now, 20, 10*time.Millisecond, 900*time.Millisecond, OK)
	if abs.Limit() != 21 || abs.(*AIMD).OverdueAfter() != time.Second {
		t.Fatalf("absolute: limit %d threshold %v", abs.Limit(), abs.(*AIMD).OverdueAfter())
	}
}

// TestVegasOverdueFloor: Vegas calls a request overdue where its queue
// estimate would pass beta, but never before 1.5 × a typical unloaded
// answer: at a limit of 100 beta (30) is at 1.43 × (57.1ms on a 40ms
// backend), within the tail of answers at that level; at 20 it is
// 1.64 × (65.6ms).
func TestVegasOverdueFloor(t *testing.T) {
	for _, c := range []struct {
		limit int
		want  time.Duration
	}{{100, 60 * time.Millisecond}, {20, time.Duration(40e6 / (1 - 6*math.Log10(20)/20))}} {
		v := must(NewVegas(VegasConfig{MaxLimit: 200, InitialLimit: c.limit}))
		now := t0
		prime(t, v, &now) // no-load 40ms
		if got := v.(*Vegas).OverdueAfter(); got != c.want {
			t.Errorf("limit %d: overdue after %v, want %v", c.limit, got, c.want)
		}
	}
}

// TestRecalibrationIsOnByDefault: gradient2, vegas and AIMD re-measure the
// no-load RTT every 15s, pinning a quarter of their limit, and the
// no-load RTT between two recalibrations is the minimum since the last one,
// so it cannot drift up with the load in between.
func TestRecalibrationIsOnByDefault(t *testing.T) {
	for _, c := range []Controller{
		must(NewGradient2(Gradient2Config{MaxLimit: 100, InitialLimit: 40})),
		must(NewVegas(VegasConfig{MaxLimit: 100, InitialLimit: 40})),
		must(NewAIMD(AIMDConfig{MaxLimit: 100, InitialLimit: 40})),
	} {
		t.Run(c.Name(), func(t *testing.T) {
			now := t0
			prime(t, c, &now) // the schedule starts at the first sample
			// 15s of samples, each slower than the last: a rolling window
			// of 100 would forget 40ms; the least batch median since the
			// last recalibration does not.
			for i := range 1475 {
				now = now.Add(10 * time.Millisecond)
				rtt := 41*time.Millisecond + time.Duration(i)*100*time.Microsecond // up to 190ms
				c.Observe(now, Sample{Start: now.Add(-rtt), RTT: rtt, Inflight: 1, Outcome: OK})
			}
			if got, _ := noloadOf(c).min(); got != 40*time.Millisecond {
				t.Fatalf("no-load RTT %v after 15s of slower samples, want 40ms", got)
			}
			before := c.Limit()
			now = now.Add(time.Second) // past 15s: the next sample pins
			if got := c.Observe(now, Sample{Start: now.Add(-40 * time.Millisecond), RTT: 40 * time.Millisecond, Inflight: before, Outcome: OK}); got != (before+3)/4 {
				t.Fatalf("limit %d at the recalibration, want a quarter of %d", got, before)
			}
			for range DefaultRecalibrationRequests {
				now = now.Add(10 * time.Millisecond)
				c.Observe(now, Sample{Start: now.Add(-time.Millisecond), RTT: 50 * time.Millisecond, Inflight: 1, Outcome: OK})
			}
			if c.Limit() != before {
				t.Fatalf("limit %d after the recalibration, want %d restored", c.Limit(), before)
			}
			// The no-load RTT is now the median of the pinned samples, and
			// holds until the next recalibration: a minimum of jittered
			// samples would sit below a typical unloaded answer and sink
			// with every sample after.
			now = now.Add(10 * time.Millisecond)
			c.Observe(now, Sample{Start: now.Add(-30 * time.Millisecond), RTT: 30 * time.Millisecond, Inflight: 1, Outcome: OK})
			if got, _ := noloadOf(c).min(); got != 50*time.Millisecond {
				t.Fatalf("no-load RTT %v after the recalibration, want the pinned samples' median, 50ms", got)
			}
		})
	}
	// Off: a negative interval, and the rolling window of 100 again.
	off := must(NewGradient2(Gradient2Config{Recalibration: Recalibration{Interval: -1}}))
	if off.(*Gradient2).recal.on() {
		t.Fatal("a negative interval left recalibration on")
	}
}

// noloadOf is c's no-load RTT window.
func noloadOf(c Controller) *minWindow {
	switch c := c.(type) {
	case *Gradient2:
		return c.noload
	case *Vegas:
		return c.noload
	case *AIMD:
		return c.noload
	}
	return nil
}

// A recalibration pins a quarter of the limit, or of what was in flight
// when it began if that is less: a limit far above what is used (open
// loop, or a backend that just lost capacity) pinned at a quarter of
// itself still queues, and the no-load RTT measured under it is not.
// (See Recalibration.Limit for the case that showed it.)
func TestRecalibrationPinsAQuarterOfWhatIsInFlight(t *testing.T) {
	for _, c := range []struct {
		name           string
		inflight, want int
	}{
		{"saturated", 40, 10},
		{"a third used", 13, 4},
		{"unknown", 0, 10}, // Inflight 0: a caller that does not count; the limit's quarter
	} {
		t.Run(c.name, func(t *testing.T) {
			g := must(NewGradient2(Gradient2Config{MaxLimit: 100, InitialLimit: 40}))
			now := t0
			prime(t, g, &now)
			now = now.Add(DefaultRecalibrationInterval)
			if got := g.Observe(now, Sample{Start: now.Add(-40 * time.Millisecond), RTT: 40 * time.Millisecond, Inflight: c.inflight, Outcome: OK}); got != c.want {
				t.Fatalf("%d in flight under a limit of 40: pinned at %d, want %d", c.inflight, got, c.want)
			}
		})
	}
}

// At large limits Vegas's alpha and beta are a fifth and 0.3 of the
// limit: at 200, answers 1.2× the no-load RTT (a queue estimate of 33)
// raise the limit. With alpha and beta 3 and 6·log10(200), 6.9 and 13.8,
// they cut it (to 182 in ten round trips).
func TestVegasBandIsProportionalAtLargeLimits(t *testing.T) {
	v := must(NewVegas(VegasConfig{MaxLimit: 1000, InitialLimit: 200}))
	now := t0
	prime(t, v, &now)          // no-load 40ms
	now = now.Add(time.Second) // the primed answers leave the round trip
	limits := feed(v, &now, 400, time.Millisecond, 48*time.Millisecond, OK)
	if slices.Min(limits) < 200 || v.Limit() <= 200 {
		t.Fatalf("limits %v over ten round trips at 1.2× the no-load RTT, want a rise from 200 and no cut", slices.Compact(limits))
	}
}

// Vegas's overdue floor is 1.5× a typical unloaded answer (the least batch
// median), not 1.5× the least answer: one answer of 30ms among 40ms ones
// leaves it at 60ms, not 45ms.
func TestVegasOverdueFloorIsTypical(t *testing.T) {
	v := must(NewVegas(VegasConfig{MaxLimit: 1000, InitialLimit: 200})).(*Vegas)
	now := t0
	prime(t, v, &now) // 40ms
	v.Observe(now, Sample{Start: now.Add(-30 * time.Millisecond), RTT: 30 * time.Millisecond, Inflight: 1, Outcome: OK})
	if nl, _ := v.noload.min(); nl != 30*time.Millisecond {
		t.Fatalf("no-load %v, want 30ms", nl)
	}
	if got := v.OverdueAfter(); got != 60*time.Millisecond {
		t.Fatalf("overdue after %v, want 60ms", got)
	}
}
