package adaptive

import (
	"testing"
	"time"
)

// t0 starts every test's timeline.
var t0 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// ctrlCase makes one kind of controller for the table-driven tests, tuned so
// that 40ms is fast, 70–100ms is the hold zone and 500ms is slow.
type ctrlCase struct {
	name string
	make func(tb testing.TB, minL, maxL, initial int) Controller
}

// must unwraps a constructor's result in test tables; a config error there
// is a bug in the test.
func must[C Controller](c C, err error) Controller {
	if err != nil {
		panic(err)
	}
	return c
}

var controllers = []ctrlCase{
	{"gradient2", func(tb testing.TB, minL, maxL, initial int) Controller {
		c, err := NewGradient2(Gradient2Config{MinLimit: minL, MaxLimit: maxL, InitialLimit: initial})
		return must(c, err)
	}},
	{"aimd", func(tb testing.TB, minL, maxL, initial int) Controller {
		c, err := NewAIMD(AIMDConfig{MinLimit: minL, MaxLimit: maxL, InitialLimit: initial, Timeout: 100 * time.Millisecond})
		return must(c, err)
	}},
	{"p95", func(tb testing.TB, minL, maxL, initial int) Controller {
		c, err := NewP95(kataP95(minL, maxL, initial))
		return must(c, err)
	}},
	{"vegas", func(tb testing.TB, minL, maxL, initial int) Controller {
		c, err := NewVegas(VegasConfig{MinLimit: minL, MaxLimit: maxL, InitialLimit: initial})
		return must(c, err)
	}},
}

// kataP95 is the kata's configuration: target p95 100ms ± 10%, decrease to
// 70%, 20 samples in a 1s window, a tick every 100ms.
func kataP95(minL, maxL, initial int) P95Config {
	return P95Config{
		MinLimit: minL, MaxLimit: maxL, InitialLimit: initial,
		Target: 100 * time.Millisecond, Tolerance: 0.1, DecreaseFactor: 0.7, IncreaseStep: 1,
		Window: time.Second, MinSamples: 20, TickInterval: 100 * time.Millisecond,
	}
}

// feed observes n samples of rtt and outcome o, one every step from *now, each
// admitted at the limit then in force (a loaded system), and returns the
// limits after each sample.
func feed(c Controller, now *time.Time, n int, step, rtt time.Duration, o Outcome) []int {
	limits := make([]int, 0, n)
	for range n {
		*now = now.Add(step)
		limits = append(limits, c.Observe(*now, Sample{Start: now.Add(-rtt), RTT: rtt, Inflight: c.Limit(), Outcome: o}))
	}
	return limits
}

// prime gives relative controllers a 40ms no-load baseline with a batch of
// samples (see minWindow) taken far below the limit, which moves no
// controller's limit.
func prime(tb testing.TB, c Controller, now *time.Time) {
	tb.Helper()
	before := c.Limit()
	n := noloadBatch
	if _, ok := c.(*P95); ok {
		n = 5 // no baseline; fewer than its MinSamples leave its window unjudged
	}
	for range n {
		*now = now.Add(10 * time.Millisecond)
		c.Observe(*now, Sample{Start: now.Add(-40 * time.Millisecond), RTT: 40 * time.Millisecond, Inflight: 1, Outcome: OK})
	}
	if c.Limit() != before {
		tb.Fatalf("%s: priming moved the limit %d → %d", c.Name(), before, c.Limit())
	}
}
