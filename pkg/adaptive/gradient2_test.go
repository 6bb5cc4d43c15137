package adaptive

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Gradient2 and Vegas step by step against hand-computed values, at the
// defaults (tolerance 1.25, smoothing 0.05, gradient floor 0.25).
func TestGradient2Steps(t *testing.T) {
	g, err := NewGradient2(Gradient2Config{MaxLimit: 100, InitialLimit: 10})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for i, st := range []struct {
		rtt      time.Duration
		o        Outcome
		inflight int
		estimate float64 // 0.95·estimate + 0.05·(estimate·gradient + √estimate)
		limit    int
	}{
		{40e6, OK, 10, 10.1, 10},       // no-load 40ms, gradient 1: 10.1581, held to start-up's rise, a tenth of 1 per answer at 10 (see pacing)
		{40e6, OK, 10, 10.2, 10},       // gradient 1: 10.2589, held likewise
		{120e6, OK, 10, 10.0622, 10},   // gradient 1.25·40/120 = 0.417
		{200e6, OK, 10, 9.8435, 9},     // gradient 0.25 (floor)
		{5e6, Dropped, 9, 9.8435, 9},   // says nothing: ignored
		{200e6, Overdue, 9, 9.6312, 9}, // a delay past the threshold: gradient 0.25, smoothed
		{40e6, Error, 9, 5.25, 5},      // a loss: at once to 0.25·min(estimate, 9 in flight) + √9
		{40e6, Error, 9, 5.25, 5},      // admitted before that cut: the same congestion event
		{40e6, OK, 5, 5.25, 5},         // gradient 1, but admitted before the cut: no growth
	} {
		now = now.Add(10 * time.Millisecond)
		start := now.Add(-st.rtt)
		if i == 7 || i == 8 {
			start = now.Add(-time.Second) // before the cut of step 6
		}
		got := g.Observe(now, Sample{Start: start, RTT: st.rtt, Inflight: st.inflight, Outcome: st.o})
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
	// A round trip of fast answers at the limit: queue 0 < alpha 3, +1
	// (start-up's first rise, a tenth per answer; see TestPacingStartUp).
	if got := feed(v, &now, 10, 4*time.Millisecond, 40*time.Millisecond, OK); got[8] != 10 || got[9] != 11 {
		t.Fatalf("a round trip of fast answers at 10: limits %v, want 10 then 11 at its end", got)
	}
	for i, st := range []struct {
		rtt    time.Duration
		o      Outcome
		before bool // admitted before the last cut
		limit  int
	}{
		{100e6, OK, false, 10},     // queue 11·0.6 = 6.6 > beta 6.25: −1
		{60e6, OK, false, 10},      // queue 10·⅓ between alpha 3 and beta 6: hold
		{40e6, Error, false, 5},    // a loss: half of min(limit, 10 in flight)
		{40e6, Timeout, true, 5},   // admitted before that cut: the same event
		{200e6, Overdue, false, 4}, // a delay past beta: −1, once per event
		{200e6, Overdue, true, 4},  // the same delay event
		{40e6, OK, true, 4},        // admitted before the cuts: no growth
		{5e6, Dropped, false, 4},   // says nothing
		{40e6, OK, false, 4},       // at the limit the cut left: +¼ (congestion avoidance)
		{40e6, OK, false, 4},       // +¼
		{40e6, OK, false, 4},       // +¼
		{40e6, OK, false, 5},       // +¼: one step per round trip
	} {
		now = now.Add(300 * time.Millisecond) // each admitted after the last cut unless before
		start := now.Add(-st.rtt)
		if st.before {
			start = t0
		}
		if got := v.Observe(now, Sample{Start: start, RTT: st.rtt, Inflight: v.Limit(), Outcome: st.o}); got != st.limit {
			t.Fatalf("step %d: limit %d, want %d", i, got, st.limit)
		}
	}
	// Before any cut a round trip of fast answers adds the whole step,
	// ⌊log10 150⌋ = 2.
	v2 := must(NewVegas(VegasConfig{MaxLimit: 200, InitialLimit: 150}))
	v2.Observe(now, Sample{Start: now, RTT: 40e6, Inflight: 1, Outcome: OK}) // the no-load RTT; below the limit: no growth
	for range 150 {                                                          // a round trip: one every 40ms/150
		now = now.Add(40 * time.Millisecond / 150)
		v2.Observe(now, Sample{Start: now.Add(-40e6), RTT: 40e6, Inflight: 150, Limit: 150, Outcome: OK}) // each admitted at 150
	}
	if got := v2.Limit(); got != 152 {
		t.Fatalf("limit %d at 150 after a round trip of fast answers, want 152", got)
	}
}

// Vegas judges a round trip by its fastest answer, as Linux's tcp_vegas
// does: one slow answer among fast ones is the tail and moves nothing,
// while a round trip in which every answer is slow lowers the limit.
// Judged by its own RTT, the slow one alone would cut.
func TestVegasJudgesARoundTripByItsFastestAnswer(t *testing.T) {
	v := must(NewVegas(VegasConfig{MaxLimit: 200, InitialLimit: 30, RTTWindow: 1000, Recalibration: Recalibration{Interval: -1}}))
	now := t0
	prime(t, v, &now)
	now = now.Add(time.Second)
	// At 30, alpha is 6 (30/5) and beta 9 (30·0.3): 52 ms against the
	// no-load 40 ms is a queue of 6.9, which holds; 80 ms alone would be
	// 15, past beta.
	feed(v, &now, 20, 4*time.Millisecond, 52*time.Millisecond, OK)
	if got := v.Limit(); got != 30 {
		t.Fatalf("limit %d after answers that hold, want 30", got)
	}
	if got := feed(v, &now, 1, 4*time.Millisecond, 80*time.Millisecond, OK)[0]; got != 30 {
		t.Fatalf("one slow answer among fast ones took the limit to %d, want 30", got)
	}
	feed(v, &now, 5, 4*time.Millisecond, 52*time.Millisecond, OK)
	limits := feed(v, &now, 30, 4*time.Millisecond, 80*time.Millisecond, OK) // three round trips of slow answers
	if got := limits[len(limits)-1]; got != 29 {
		t.Fatalf("limit %d after round trips of slow answers, want 29 (−1, once per congestion event): %v", got, limits)
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

// An unbounded batch window (gradient2's and aimd's no-load RTT between
// recalibrations) is the least median of its whole batches of noloadBatch
// values, the partial batch's median before the first is whole, checked
// against the obvious computation; and it does not sink with the number
// of jittered values as a minimum does.
func TestBatchWindowAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	w := newBatchWindow(0)
	var vals []time.Duration
	var best time.Duration
	for i := range 3000 {
		v := time.Duration(50e6 * math.Exp(0.05*rng.NormFloat64()))
		w.push(v)
		vals = append(vals, v)
		batch := vals[len(vals)-(len(vals)-1)%noloadBatch-1:]
		med := slices.Sorted(slices.Values(batch))[(len(batch)-1)/2]
		if len(batch) == noloadBatch && (best == 0 || med < best) {
			best = med
		}
		want := best
		if want == 0 {
			want = med
		}
		if got, _ := w.min(); got != want {
			t.Fatalf("value %d: %v, want %v", i, got, want)
		}
	}
	if got, _ := w.min(); got < 47*time.Millisecond || slices.Min(vals) > 43*time.Millisecond {
		t.Fatalf("after 3,000 values: batch window %v (want ≥ 47ms, near the 50ms median), minimum %v (a minimum sinks below 43ms)", got, slices.Min(vals))
	}
}

// One round trip's answers past a knee move gradient2's estimate by about
// one round trip's worth, as many as they are: 400 answers at 2× the
// no-load RTT (gradient 0.625) take 400 to 290, where, weighed 0.05 each,
// they took it to 9.4, near the gradient's fixed point 7 (0.625·e + √e = e): a
// collapse within the round trip before the first answer to the cut came
// back. At 10 in flight 0.05 is less than 1/10: Smoothing unchanged.
func TestGradient2FallIsPacedPerRoundTrip(t *testing.T) {
	for _, c := range []struct {
		inflight int
		lo, hi   float64
	}{
		{400, 285, 295}, // e' = e + (−0.375e + √e)/400 per answer: 290.2
		{10, 9.65, 9.8}, // e' = e + 0.05·(−0.375e + √e): 9.72
	} {
		g := must(NewGradient2(Gradient2Config{MaxLimit: 1000, InitialLimit: c.inflight})).(*Gradient2)
		now := t0
		prime(t, g, &now) // no-load 40ms
		for range c.inflight {
			now = now.Add(time.Millisecond)
			g.Observe(now, Sample{Start: now.Add(-80 * time.Millisecond), RTT: 80 * time.Millisecond, Inflight: c.inflight, Outcome: OK})
		}
		if g.estimate < c.lo || g.estimate > c.hi {
			t.Errorf("%d in flight, a round trip at 2× the no-load RTT: estimate %.2f, want in [%v, %v]", c.inflight, g.estimate, c.lo, c.hi)
		}
	}
}

// Gradient2 calls a request overdue where its gradient would lower the
// estimate, but never before 1.5× the no-load RTT: at an estimate of 200
// that RTT is 1.34× (53.8ms on a 40ms backend), inside the jitter's tail
// at the estimate's own equilibrium.
func TestGradient2OverdueFloor(t *testing.T) {
	for _, c := range []struct {
		estimate int
		want     time.Duration
	}{
		{200, 60 * time.Millisecond},
		{16, 66666666}, // 1.25·40ms / (1 − 1/√16): 66.7ms
	} {
		g := must(NewGradient2(Gradient2Config{MaxLimit: 1000, InitialLimit: c.estimate})).(*Gradient2)
		now := t0
		prime(t, g, &now)
		if got := g.OverdueAfter(); got != c.want {
			t.Errorf("estimate %d: overdue after %v, want %v", c.estimate, got, c.want)
		}
	}
}
