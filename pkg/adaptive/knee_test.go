package adaptive

import (
	"testing"
	"time"
)

// A request lost one past the knee (the most in flight answered at the
// no-load RTT) cuts the limit to just below it, not by half (gradient2:
// to its floor's target, 16.7 from 41); a second loss before any answer
// admitted after the cut is persistent congestion and takes the law's
// cut; an error keeps the law's cut. make bench-gate's backend, whose
// latency doubles one past 40, held the controllers at 27–30 in flight
// with the halving.
func TestLossPastTheKneeCutsToIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() Controller
	}{
		{"gradient2", func() Controller { return must(NewGradient2(Gradient2Config{MaxLimit: 100, InitialLimit: 41})) }},
		{"aimd", func() Controller { return must(NewAIMD(AIMDConfig{MaxLimit: 100, InitialLimit: 41})) }},
		{"vegas", func() Controller { return must(NewVegas(VegasConfig{MaxLimit: 100, InitialLimit: 41})) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fast := func(c Controller, now *time.Time) {
				for i := range 40 { // answers admitted at up to 40 in flight, at the no-load RTT
					*now = now.Add(2 * time.Millisecond)
					c.Observe(*now, Sample{Start: now.Add(-50 * time.Millisecond), RTT: 50 * time.Millisecond, Inflight: 1 + i, Limit: 41, Outcome: OK})
				}
			}
			c, now := tc.make(), t0
			fast(c, &now)
			now = now.Add(10 * time.Millisecond)
			if got := c.Observe(now, Sample{Start: now.Add(-100 * time.Millisecond), RTT: 100 * time.Millisecond, Inflight: 41, Limit: 41, Outcome: Timeout}); got != 39 && got != 40 {
				t.Fatalf("lost one past the knee of 40: limit %d, want 39 or 40", got)
			}
			now = now.Add(10 * time.Millisecond)
			if got := c.Observe(now, Sample{Start: now.Add(-5 * time.Millisecond), RTT: 5 * time.Millisecond, Inflight: 40, Limit: 40, Outcome: Timeout}); got > 20 {
				t.Fatalf("a second loss, admitted after the cut, before any of its answers: limit %d, want the law's (≤ 20)", got)
			}
			c, now = tc.make(), t0
			fast(c, &now)
			now = now.Add(10 * time.Millisecond)
			if got := c.Observe(now, Sample{Start: now.Add(-50 * time.Millisecond), RTT: 50 * time.Millisecond, Inflight: 41, Limit: 41, Outcome: Error}); got > 20 {
				t.Fatalf("an error one past the knee: limit %d, want the law's (≤ 20)", got)
			}
		})
	}
}
