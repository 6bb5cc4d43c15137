package adaptive

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Gradient2 and Vegas step by step against hand-computed values.
func TestGradient2Steps(t *testing.T) {
	g, err := NewGradient2(Gradient2Config{MaxLimit: 100, InitialLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for i, st := range []struct {
		rtt      time.Duration
		o        Outcome
		estimate float64 // 0.8·estimate + 0.2·(estimate·gradient + √estimate)
		limit    int
	}{
		{40e6, OK, 10.6325, 10},     // no-load 40ms, gradient 1
		{40e6, OK, 11.2846, 11},     // gradient 1
		{120e6, OK, 10.8280, 10},    // gradient clamp(1.5·40/120) = 0.5
		{200e6, OK, 10.4033, 10},    // gradient 0.5 (floor)
		{5e6, Dropped, 10.0081, 10}, // gradient 0.5, RTT ignored
	} {
		now = now.Add(10 * time.Millisecond)
		got := g.Observe(now, Sample{Start: now.Add(-st.rtt), RTT: st.rtt, Inflight: g.Limit(), Outcome: st.o})
		if got != st.limit || math.Abs(g.estimate-st.estimate) > 1e-3 {
			t.Fatalf("step %d: limit %d estimate %.4f, want %d %.4f", i, got, g.estimate, st.limit, st.estimate)
		}
	}
	if rtt, _ := g.noload.min(); rtt != 40*time.Millisecond {
		t.Fatalf("no-load %v, want 40ms (the dropped 5ms must not count)", rtt)
	}
}

func TestVegasSteps(t *testing.T) {
	v, err := NewVegas(VegasConfig{MaxLimit: 200, InitialLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for i, st := range []struct {
		rtt   time.Duration
		o     Outcome
		limit int
	}{
		{40e6, OK, 11},     // queue 0 < alpha 3: +1
		{100e6, OK, 10},    // queue 11·0.6 = 6.6 > beta 6.25: −1
		{60e6, OK, 10},     // queue 10·⅓ between alpha 3 and beta 6: hold
		{40e6, Error, 9},   // −1
		{40e6, Timeout, 8}, // −1
	} {
		now = now.Add(10 * time.Millisecond)
		if got := v.Observe(now, Sample{RTT: st.rtt, Inflight: v.Limit(), Outcome: st.o}); got != st.limit {
			t.Fatalf("step %d: limit %d, want %d", i, got, st.limit)
		}
	}
	v.limit = 150 // step = ⌊log10 150⌋ = 2
	if got := v.Observe(now, Sample{RTT: 40e6, Inflight: 150, Outcome: OK}); got != 152 {
		t.Fatalf("limit %d at 150 after a fast sample, want 152", got)
	}
}

// The no-load RTT is a rolling minimum: after a deploy that makes every
// request slower, it drifts up once RTTWindow samples have passed.
func TestGradient2BaselineDrifts(t *testing.T) {
	g, err := NewGradient2(Gradient2Config{RTTWindow: 10})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	feed(g, &now, 10, time.Millisecond, 40*time.Millisecond, OK)
	feed(g, &now, 9, time.Millisecond, 80*time.Millisecond, OK)
	if rtt, _ := g.noload.min(); rtt != 40*time.Millisecond {
		t.Fatalf("no-load %v, want 40ms still", rtt)
	}
	feed(g, &now, 1, time.Millisecond, 80*time.Millisecond, OK)
	if rtt, _ := g.noload.min(); rtt != 80*time.Millisecond {
		t.Fatalf("no-load %v, want 80ms after a full window", rtt)
	}
}

// minWindow against the obvious O(n) minimum of the last n values.
func TestMinWindowMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for range 200 {
		n := 1 + r.IntN(20)
		w := newMinWindow(n)
		var all []time.Duration
		for i := range 300 {
			if r.IntN(100) == 0 {
				w.reset()
				all = all[:0]
			}
			v := time.Duration(r.IntN(50))
			w.push(v)
			all = append(all, v)
			want := all[max(0, len(all)-n)]
			for _, x := range all[max(0, len(all)-n):] {
				want = min(want, x)
			}
			if got, ok := w.min(); !ok || got != want {
				t.Fatalf("n=%d push %d: min %v, want %v", n, i, got, want)
			}
		}
	}
}

// Recalibration pins the limit, re-measures the no-load RTT from samples
// admitted under the pin, and restores the limit; the jittered schedule is
// reproducible from the seed.
func TestRecalibration(t *testing.T) {
	recal := func() Recalibration {
		return Recalibration{Interval: 10 * time.Second, Jitter: time.Second, Rand: rand.New(rand.NewPCG(1, 2)), Limit: 2, RequestCount: 5}
	}
	for _, name := range []string{"gradient2", "vegas"} {
		t.Run(name, func(t *testing.T) {
			var c Controller
			var noload *minWindow
			if name == "gradient2" {
				g := must(NewGradient2(Gradient2Config{MaxLimit: 100, InitialLimit: 30, Recalibration: recal()})).(*Gradient2)
				c, noload = g, g.noload
			} else {
				v := must(NewVegas(VegasConfig{MaxLimit: 100, InitialLimit: 30, Recalibration: recal()})).(*Vegas)
				c, noload = v, v.noload
			}
			now := t0
			var pinnedAt time.Time
			for now.Before(t0.Add(12 * time.Second)) {
				if feed(c, &now, 1, 100*time.Millisecond, 40*time.Millisecond, OK)[0] == 2 {
					pinnedAt = now
					break
				}
			}
			if d := pinnedAt.Sub(t0); d < 9*time.Second || d > 11100*time.Millisecond {
				t.Fatalf("pinned after %v, want 10s ± 1s", d)
			}
			// Samples admitted before the pin, or not OK, do not count.
			for _, s := range []Sample{
				{Start: pinnedAt.Add(-time.Millisecond), RTT: 60e6, Inflight: 2, Outcome: OK},
				{Start: pinnedAt, RTT: 60e6, Inflight: 2, Outcome: Error},
			} {
				if got := c.Observe(now, s); got != 2 {
					t.Fatalf("limit %d while pinned, want 2", got)
				}
			}
			for i := range 5 {
				now = now.Add(100 * time.Millisecond)
				got := c.Observe(now, Sample{Start: now.Add(-60e6), RTT: 60e6, Inflight: 2, Outcome: OK})
				if i < 4 && got != 2 {
					t.Fatalf("measure %d: limit %d, want 2 until 5 samples", i, got)
				}
				if i == 4 && got < 25 {
					t.Fatalf("limit %d after recalibration, want the pre-pin limit back", got)
				}
			}
			if rtt, _ := noload.min(); rtt != 60*time.Millisecond {
				t.Fatalf("no-load %v after recalibration, want the re-measured 60ms", rtt)
			}
		})
	}
}
