package adaptive

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// overdueRecorder is a Controller with a fixed limit and overdue threshold that
// records what its gate tells it.
type overdueRecorder struct {
	limit   int
	after   time.Duration
	samples []string
}

func (r *overdueRecorder) Observe(now time.Time, s Sample) int {
	r.samples = append(r.samples, fmt.Sprintf("%v@%v:%v", s.Start.Sub(t0), now.Sub(t0), s.Outcome))
	return r.limit
}
func (r *overdueRecorder) Limit() int                  { return r.limit }
func (r *overdueRecorder) Name() string                { return "overdueRecorder" }
func (r *overdueRecorder) OverdueAfter() time.Duration { return r.after }

func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// TestGateReportsOverdueOnce: a request still in flight past the
// controller's threshold is reported as Overdue at the gate's first event
// after it (an admission, a rejection or a release), once, oldest first;
// its own release is reported as usual.
func TestGateReportsOverdueOnce(t *testing.T) {
	r := &overdueRecorder{limit: 2, after: 100 * time.Millisecond}
	g := newGate(t, GateConfig{Controller: r})
	a, _ := g.TryAcquire(at(0))
	b, _ := g.TryAcquire(at(30))
	g.TryAcquire(at(90)) // at the limit: rejected; nothing is overdue yet
	if len(r.samples) != 0 {
		t.Fatalf("reported %v before any threshold passed", r.samples)
	}
	g.TryAcquire(at(140)) // a is 140ms old, b 110ms: both overdue
	g.TryAcquire(at(200)) // nothing new
	a.Release(at(300), OK)
	b.Release(at(310), Error)
	want := "0s@140ms:overdue 30ms@140ms:overdue 0s@300ms:ok 30ms@310ms:error"
	if got := strings.Join(r.samples, " "); got != want {
		t.Fatalf("samples %s, want %s", got, want)
	}
	// Without a threshold (0: none yet) nothing is ever overdue.
	r2 := &overdueRecorder{limit: 1}
	g2 := newGate(t, GateConfig{Controller: r2})
	c, _ := g2.TryAcquire(at(0))
	g2.TryAcquire(at(10_000))
	c.Release(at(20_000), OK)
	if got := strings.Join(r2.samples, " "); got != "0s@20s:ok" {
		t.Fatalf("samples %s with no threshold", got)
	}
}

// TestGateJudgesAnOverdueRequestLost: an overdue request older than one
// already answered, and in flight for more than twice that one's RTT, is
// lost (reported as a Timeout), as TCP's RACK judges a segment sent before
// one delivered: the backend answers newer requests and not it. A request
// that is merely slow, with nothing newer answered, stays Overdue.
func TestGateJudgesAnOverdueRequestLost(t *testing.T) {
	r := &overdueRecorder{limit: 3, after: 100 * time.Millisecond}
	g := newGate(t, GateConfig{Controller: r})
	dropped, _ := g.TryAcquire(at(0))
	fast, _ := g.TryAcquire(at(10))
	slow, _ := g.TryAcquire(at(20))
	fast.Release(at(70), OK)      // newer than dropped; 60ms
	g.TryAcquireBelow(at(101), 0) // an event that admits nothing: dropped is overdue (101ms > 100ms), not yet lost (≤ 2 × 60ms)
	g.TryAcquireBelow(at(125), 0) // slow is overdue too; dropped, 125ms old (> 2 × 60ms) and older than fast, is lost
	slow.Release(at(400), OK)
	dropped.Release(at(1000), Timeout) // the client gives up
	want := "10ms@70ms:ok 0s@101ms:overdue 20ms@125ms:overdue 0s@125ms:timeout 20ms@400ms:ok 0s@1s:timeout"
	if got := strings.Join(r.samples, " "); got != want {
		t.Fatalf("samples\n%s\nwant\n%s", got, want)
	}
	if g.Inflight() != 0 || g.late.head != nil || g.pending.head != nil {
		t.Fatalf("inflight %d, lists %v %v after every release", g.Inflight(), g.late.head, g.pending.head)
	}
}

// TestLossBurstCutsOnce: the losses of one congestion event (requests
// admitted before the cut) cut the limit once, from what was in flight when
// the first was admitted, and their successes do not raise it.
func TestLossBurstCutsOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Controller
		want int // after the burst
	}{
		{"aimd", must(NewAIMD(AIMDConfig{MaxLimit: 200, InitialLimit: 100})), 6},
		{"vegas", must(NewVegas(VegasConfig{MaxLimit: 200, InitialLimit: 100})), 6},
		// 0.25·12 + √12 = 6.46
		{"gradient2", must(NewGradient2(Gradient2Config{MaxLimit: 200, InitialLimit: 100})), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, now := tc.c, t0
			prime(t, c, &now)
			now = at(1000)
			// 12 in flight when the first lost request was admitted, though
			// the limit stood at 100.
			c.Observe(now, Sample{Start: at(900), RTT: 100 * time.Millisecond, Inflight: 12, Outcome: Error})
			if c.Limit() != tc.want {
				t.Fatalf("limit %d after the first loss, want %d", c.Limit(), tc.want)
			}
			for i := range 20 { // the rest of the burst, and successes, all admitted before the cut
				now = now.Add(time.Millisecond)
				o := []Outcome{Error, Timeout, OK}[i%3]
				c.Observe(now, Sample{Start: at(950), RTT: 40 * time.Millisecond, Inflight: 12, Outcome: o})
			}
			if c.Limit() != tc.want {
				t.Fatalf("limit %d after the burst, want %d: one event, one cut", c.Limit(), tc.want)
			}
			// A loss of a request admitted after the cut is a new event.
			now = now.Add(time.Millisecond)
			c.Observe(now, Sample{Start: now.Add(-time.Millisecond), RTT: time.Millisecond, Inflight: tc.want, Outcome: Error})
			if c.Limit() >= tc.want {
				t.Fatalf("limit %d after a new loss, want below %d", c.Limit(), tc.want)
			}
		})
	}
}

// TestGrowthAtMostDoublesPerRTT: on a backend that answers every request
// at its no-load RTT, one round trip of samples, all admitted at the limit,
// at most doubles the limit (TCP's slow start), for every controller at
// its defaults.
func TestGrowthAtMostDoublesPerRTT(t *testing.T) {
	for _, tc := range controllers {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.make(t, 1, 1000, 10)
			g := newGate(t, GateConfig{Controller: c})
			now := t0
			for round := range 8 {
				before := g.Limit()
				var leases []Lease
				for {
					l, ok := g.TryAcquire(now)
					if !ok {
						break
					}
					leases = append(leases, l)
				}
				now = now.Add(40 * time.Millisecond)
				for _, l := range leases {
					l.Release(now, OK)
				}
				if after := g.Limit(); after > 2*before {
					t.Fatalf("round %d: limit %d → %d in one RTT", round, before, after)
				}
			}
		})
	}
}

// TestPacing: before its first cut a limit grows by start-up's schedule
// (TestPacingStartUp); after it, at or above the limit the cut left, by a
// step per round trip, step/limit per sample (congestion avoidance); below
// it, by the whole step per sample (slow start, regaining what was cut).
func TestPacing(t *testing.T) {
	p := pacing{initial: 10}
	if got := p.grow(t0, Sample{Inflight: 10}, 10, 1); got != 10 {
		t.Fatalf("start-up: 10 → %d after one sample, want 10 (a tenth of a step)", got)
	}
	p.cut(8)
	limit := 8
	for i := range 8 { // one round trip of samples at 8
		limit = p.grow(t0, Sample{Inflight: limit}, limit, 1)
		if want := 8 + (i+1)/8; limit != want {
			t.Fatalf("sample %d after the cut: limit %d, want %d", i, limit, want)
		}
	}
	if got := p.grow(t0, Sample{Inflight: 5}, 5, 1); got != 6 {
		t.Fatalf("below the cut's limit: 5 → %d, want 6", got)
	}
	if got := p.growF(t0, Sample{Inflight: 20}, 20, 25); got != 20.05 {
		t.Fatalf("growF above the threshold: 20 → %v, want 20.05", got)
	}
}

// TestPacingStartUp: before the first cut the limit's rise per round trip
// doubles (1, 2, 4, … above the initial limit, so 10 → 11 → 13 → 17 → 25
// → 41 → 73: no more than doubling), spread over the round trip, and
// never runs more than one round trip's rise past the most in flight that
// has been answered: a backend that drops every request admitted above 10
// holds the limit at 11, one request over, however many answers come
// back. Doubling the limit per round trip, as TCP's slow start does from
// a window of a few packets, sends a whole limit's worth of requests past
// a cap that the initial limit already reaches, in the round trip before
// the first of them can be missed. A gate admitting under a ceiling (a
// distributed node at its share: a quarter of the answers per round trip,
// each admitted at the ceiling, a quarter of the limit: Inflight scaled)
// rises alike. A continuous estimate (growF) is held alike.
func TestPacingStartUp(t *testing.T) {
	const rtt = 40 * time.Millisecond
	for _, per := range []int{1, 4} { // answers per round trip: the limit, or a quarter of it
		p := pacing{initial: 10}
		limit, now := 10, t0
		for round, want := range []int{11, 13, 17, 25, 41, 73} {
			start, n := limit, max(1, limit/per)
			for i := range n { // a round trip: n answers spread over it, each admitted at the limit
				now = now.Add(rtt / time.Duration(n))
				s := Sample{Start: now.Add(-rtt), RTT: rtt, Inflight: start}
				if per > 1 {
					s.Ceiling = n // admitted at the ceiling: Inflight scaled to the limit
				}
				limit = p.grow(now, s, limit, 1)
				if half := start + (want-start+1)/2; i < n/2 && limit > half {
					t.Fatalf("1/%d of the answers: round trip %d: limit %d → %d after %d of %d answers: the rise is not spread (at most %d)", per, round+1, start, limit, i+1, n, half)
				}
			}
			if limit != want {
				t.Fatalf("1/%d of the answers: round trip %d: limit %d → %d, want %d", per, round+1, start, limit, want)
			}
		}
	}

	p := pacing{initial: 10}
	limit, now := 10, t0
	for range 100 { // answers only for the requests admitted at 10 or fewer in flight
		now = now.Add(rtt / 10)
		limit = p.grow(now, Sample{Start: now.Add(-rtt), RTT: rtt, Inflight: 10}, limit, 1)
	}
	if limit != 11 {
		t.Errorf("nothing admitted above 10 answered: limit %d, want 11", limit)
	}
	est := 10.0
	for range 100 {
		now = now.Add(rtt / 10)
		est = p.growF(now, Sample{Start: now.Add(-rtt), RTT: rtt, Inflight: 10}, est, est+1)
	}
	if est > 11 {
		t.Errorf("growF: nothing admitted above 10 answered: estimate %.2f, want at most 11", est)
	}
}

// TestPacingLossCeiling: after a loss at 10 in flight the limit climbs
// back under CUBIC's curve: fast to 9 (in about a second), then flat to
// 10 at 2.3 s, reaching 11 — the first probe past the level that lost —
// only after 3.7 s, and past it faster and faster
// (W(t) = 10 + 0.4·(t − ∛12.5)³).
// Growing a step per round trip of 50 ms without it, the limit would
// probe 11 in under half a second. A continuous estimate is held alike.
func TestPacingLossCeiling(t *testing.T) {
	var p pacing
	p.loss(t0, 10, 5)
	limit, at := 5, map[int]time.Duration{}
	for ms := 0; ms <= 6000; ms += 5 { // a sample at the limit every 5 ms: 10 per round trip at 50 ms
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		next := p.grow(now, Sample{Inflight: limit}, limit, 1)
		if c := p.ceiling(now); next > limit && float64(next) > c {
			t.Fatalf("at %v: grew %d → %d, above the ceiling %.2f", now.Sub(t0), limit, next, c)
		}
		for l := limit + 1; l <= next; l++ {
			at[l] = now.Sub(t0)
		}
		limit = next
	}
	for _, c := range []struct {
		limit    int
		from, to time.Duration
	}{
		{9, 900 * time.Millisecond, 1300 * time.Millisecond},
		{10, 2300 * time.Millisecond, 2600 * time.Millisecond},
		{11, 3650 * time.Millisecond, 3900 * time.Millisecond},
		{12, 4000 * time.Millisecond, 4300 * time.Millisecond},
	} {
		if got, ok := at[c.limit]; !ok || got < c.from || got > c.to {
			t.Errorf("reached %d at %v (reached %v), want within [%v, %v]", c.limit, got, ok, c.from, c.to)
		}
	}
	if limit < 14 {
		t.Errorf("limit %d 6 s after the loss: past the plateau it should grow (to the ceiling %.1f)", limit, p.ceiling(t0.Add(6*time.Second)))
	}
	if got := p.growF(t0.Add(2*time.Second), Sample{Inflight: 10}, 9.5, 12); got > p.ceiling(t0.Add(2*time.Second)) {
		t.Errorf("growF to %.2f, above the ceiling %.2f", got, p.ceiling(t0.Add(2*time.Second)))
	}
	// A loss does not lower a limit already above the ceiling: it only
	// stops it growing.
	if got := p.grow(t0.Add(time.Second), Sample{Inflight: 12}, 12, 1); got != 12 {
		t.Errorf("12 above the ceiling grew to %d, want it held at 12", got)
	}
}
