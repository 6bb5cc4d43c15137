package adaptive

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The kata's controller tests, for every controller: low latency raises the
// limit, high latency lowers it fast, and it recovers (not instantly) once
// the backend is fast again.
func TestControllersIncreaseUnderLowLatency(t *testing.T) {
	for _, tc := range controllers {
		t.Run(tc.name, func(t *testing.T) {
			c, now := tc.make(t, 1, 10, 2), t0
			limits := feed(c, &now, 200, 10*time.Millisecond, 40*time.Millisecond, OK)
			if got := limits[len(limits)-1]; got <= 2 {
				t.Fatalf("limit %d after 200 fast samples, want > 2", got)
			}
			if !slices.IsSorted(limits) {
				t.Fatalf("limit fell under low latency: %v", limits)
			}
		})
	}
}

func TestControllersDecreaseFastUnderHighLatency(t *testing.T) {
	for _, tc := range controllers {
		t.Run(tc.name, func(t *testing.T) {
			c, now := tc.make(t, 1, 10, 10), t0
			prime(t, c, &now)
			// Ten round trips of slow samples: the controllers that cut
			// once per congestion event cut once in each. (p95 judges a
			// window of at least 20 samples admitted since its last
			// decrease: it gets them faster, in three round trips.)
			step, n := 100*time.Millisecond, 50
			if tc.name == "p95" {
				step, n = 10*time.Millisecond, 150
			}
			limits := feed(c, &now, n, step, 500*time.Millisecond, OK)
			if got := limits[len(limits)-1]; got > 5 {
				t.Fatalf("limit %d after %d slow samples, want ≤ 5: %v", got, n, limits)
			}
			if slices.Reverse(limits); !slices.IsSorted(limits) {
				t.Fatalf("limit rose under high latency: %v", limits)
			}
		})
	}
}

func TestControllersRecoverAfterBackendImproves(t *testing.T) {
	for _, tc := range controllers {
		t.Run(tc.name, func(t *testing.T) {
			c, now := tc.make(t, 1, 20, 10), t0
			prime(t, c, &now)
			now = now.Add(time.Second) // vegas judges a round by its fastest answer: not the prime's
			feed(c, &now, 100, 10*time.Millisecond, 500*time.Millisecond, OK)
			low := c.Limit()
			if low >= 10 {
				t.Fatalf("phase 1: limit %d did not fall", low)
			}
			if got := feed(c, &now, 1, 10*time.Millisecond, 40*time.Millisecond, OK)[0]; got > low+1 {
				t.Fatalf("phase 2: one fast sample took the limit from %d to %d: recovery should be gradual", low, got)
			}
			feed(c, &now, 300, 10*time.Millisecond, 40*time.Millisecond, OK)
			if got := c.Limit(); got <= low+2 {
				t.Fatalf("phase 2: limit %d after 3s of fast samples, want well above %d", got, low)
			}
		})
	}
}

// Inside the hold zone the controllers with a band (p95, vegas) or an
// equilibrium (gradient2) do not flap. AIMD has neither: it probes upward by
// design, so it is left out.
func TestControllersHoldInsideTheBand(t *testing.T) {
	for _, tc := range []struct {
		name   string
		c      Controller
		rtts   []time.Duration // cycled
		lo, hi int
	}{
		{"p95", must(NewP95(kataP95(1, 20, 10))), []time.Duration{95e6, 100e6, 105e6, 98e6}, 10, 10},
		{"vegas", must(NewVegas(VegasConfig{MaxLimit: 20, InitialLimit: 10, RTTWindow: 1000, Recalibration: Recalibration{Interval: -1}})), []time.Duration{70e6}, 10, 10},
		// 1.5·40/80 = 0.75 and 16·0.75 + √16 = 16: a fixed point.
		{"gradient2", must(NewGradient2(Gradient2Config{MaxLimit: 40, InitialLimit: 16, RTTWindow: 1000, Tolerance: 1.5, Recalibration: Recalibration{Interval: -1}})), []time.Duration{80e6}, 15, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			prime(t, tc.c, &now)
			now = now.Add(time.Second) // vegas judges a round by its fastest answer: not the prime's
			for i := range 500 {
				rtt := tc.rtts[i%len(tc.rtts)]
				if got := feed(tc.c, &now, 1, 10*time.Millisecond, rtt, OK)[0]; got < tc.lo || got > tc.hi {
					t.Fatalf("sample %d (rtt %v): limit %d outside [%d, %d]", i, rtt, got, tc.lo, tc.hi)
				}
			}
		})
	}
}

// Error, Timeout and Dropped never raise a limit, and Error and Timeout
// lower it for every controller (p95's errors through its error rate, its
// timeouts at once: TestP95TimeoutsCutOncePerEvent).
func TestControllersBadOutcomesNeverRaise(t *testing.T) {
	for _, tc := range controllers {
		for _, o := range []Outcome{Error, Timeout, Dropped} {
			t.Run(tc.name+"/"+o.String(), func(t *testing.T) {
				c, now := tc.make(t, 1, 50, 30), t0
				prime(t, c, &now)
				limits := feed(c, &now, 30, 10*time.Millisecond, 5*time.Millisecond, o)
				if slices.Max(limits) > 30 {
					t.Fatalf("limit rose on %v: %v", o, limits)
				}
				if o != Dropped && limits[len(limits)-1] >= 30 {
					t.Fatalf("limit did not fall on %v: %v", o, limits)
				}
			})
		}
	}
}

// Samples taken far below the limit cannot raise it.
func TestControllersUtilizationGuard(t *testing.T) {
	for _, tc := range controllers {
		t.Run(tc.name, func(t *testing.T) {
			c, now := tc.make(t, 1, 100, 20), t0
			for range 300 {
				now = now.Add(10 * time.Millisecond)
				c.Observe(now, Sample{Start: now.Add(-40 * time.Millisecond), RTT: 40 * time.Millisecond, Inflight: 3, Outcome: OK})
			}
			if got := c.Limit(); got != 20 {
				t.Fatalf("limit %d after idle fast samples, want 20", got)
			}
		})
	}
}

func TestControllerNames(t *testing.T) {
	for _, tc := range controllers {
		if got := tc.make(t, 0, 0, 0).Name(); got != tc.name {
			t.Errorf("Name() = %q, want %q", got, tc.name)
		}
	}
}

func TestControllerDefaults(t *testing.T) {
	for _, tc := range controllers {
		c := tc.make(t, 0, 0, 0)
		if c.Limit() != DefaultInitialLimit {
			t.Errorf("%s: initial limit %d, want %d", tc.name, c.Limit(), DefaultInitialLimit)
		}
		if c := tc.make(t, 0, 5, 0); c.Limit() != 5 {
			t.Errorf("%s: initial limit %d with MaxLimit 5, want 5", tc.name, c.Limit())
		}
	}
}

func TestControllerConfigErrors(t *testing.T) {
	seeded := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"negative limit", second(NewAIMD(AIMDConfig{MinLimit: -1})), "must not be negative"},
		{"min above max", second(NewGradient2(Gradient2Config{MinLimit: 10, MaxLimit: 5})), "MinLimit 10 above MaxLimit 5"},
		{"initial outside", second(NewVegas(VegasConfig{MaxLimit: 5, InitialLimit: 6})), "InitialLimit 6 outside"},
		{"tolerance below 1", second(NewGradient2(Gradient2Config{Tolerance: 0.5})), "Tolerance 0.5"},
		{"smoothing above 1", second(NewGradient2(Gradient2Config{Smoothing: 2})), "Smoothing 2"},
		{"backoff 1", second(NewAIMD(AIMDConfig{Backoff: 1})), "Backoff 1 outside (0, 1)"},
		{"no target", second(NewP95(P95Config{})), "Target 0s: set it"},
		{"decrease factor", second(NewP95(P95Config{Target: time.Second, DecreaseFactor: 1.5})), "DecreaseFactor 1.5"},
		{"min samples", second(NewP95(P95Config{Target: time.Second, MinSamples: 10, MaxSamples: 5})), "MinSamples 10 above MaxSamples 5"},
		{"error rate", second(NewP95(P95Config{Target: time.Second, MaxErrorRate: 2})), "MaxErrorRate 2"},
		{"jitter without rand", second(NewVegas(VegasConfig{Recalibration: Recalibration{Interval: time.Second, Jitter: time.Millisecond}})), "needs a Rand"},
		{"jitter too big", second(NewVegas(VegasConfig{Recalibration: Recalibration{Interval: time.Second, Jitter: time.Second, Rand: seeded}})), "Jitter 1s outside"},
		{"recal limit", second(NewGradient2(Gradient2Config{MaxLimit: 10, Recalibration: Recalibration{Interval: time.Second, Limit: 11}})), "Recalibration.Limit 11"},
		{"recal settings while off", second(NewGradient2(Gradient2Config{Recalibration: Recalibration{Interval: -1, Limit: 3}})), "negative Interval (off)"},
		{"recal with an absolute timeout", second(NewAIMD(AIMDConfig{Timeout: time.Second, Recalibration: Recalibration{Interval: time.Second}})), "absolute Timeout does not use"},
		{"aimd tolerance", second(NewAIMD(AIMDConfig{Tolerance: 0.9})), "Tolerance 0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", tc.err, tc.want)
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }
