package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// Backends the tests share.
var (
	quadratic60 = Backend{Base: 50 * time.Millisecond, Knee: 60}
	linear4     = Backend{Base: 50 * time.Millisecond, Knee: 4, Latency: Linear}
	shallowExp  = Backend{Base: 100 * time.Millisecond, Knee: 10, Growth: 1.1, Latency: Exponential}
)

func TestLatencyModels(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name string
		b    Backend
		n    int
		c, j float64
		want time.Duration
	}{
		{"quadratic at its knee", quadratic60, 60, 1, 1, 100 * ms},
		{"linear below the knee is flat", linear4, 3, 1, 1, 50 * ms},
		{"linear at the knee", linear4, 4, 1, 1, 50 * ms},
		{"linear adds base/knee per request", linear4, 6, 1, 1, 75 * ms},
		{"linear pure form", Backend{Base: 50 * ms, Knee: 1, Latency: Linear}, 7, 1, 1, 350 * ms},
		{"linear at half capacity", linear4, 6, 0.5, 1, 150 * ms},
		{"exponential below the knee is flat", shallowExp, 10, 1, 1, 100 * ms},
		{"exponential one past the knee", shallowExp, 11, 1, 1, 110 * ms},
		{"exponential three past the knee", shallowExp, 13, 1, 1, 133100 * time.Microsecond},
		{"exponential at half capacity", shallowExp, 6, 0.5, 1, 121 * ms},
		{"jitter multiplies", linear4, 8, 1, 1.5, 150 * ms},
		{"a steep model is capped", Backend{Base: time.Second, Knee: 1, Growth: 10, Latency: Exponential}, 1000, 1, 1, maxLatency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.b.latency(tc.n, tc.c, tc.j)
			if d := got - tc.want; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("latency(n=%d, c=%v, j=%v) = %v, want %v", tc.n, tc.c, tc.j, got, tc.want)
			}
		})
	}
}

// peak is checked against a naive scan: no concurrency on a fine grid beats
// its throughput, and its throughput is reached at the concurrency it names.
func TestPeakAgainstScan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       Backend
		c       float64
		wantN   float64
		wantRPS float64
	}{
		{"quadratic", Backend{Base: 50 * time.Millisecond, Knee: 60, Jitter: 0.05}, 1, 60, 60 / (2 * 0.05 * math.Exp(0.05*0.05/2))},
		{"quadratic, a third", quadratic60, 1.0 / 3, 20, 200},
		{"linear", linear4, 1, 4, 80},
		{"linear pure, exponential jitter", Backend{Base: 50 * time.Millisecond, Knee: 1, Latency: Linear, Jitter: 0.1, JitterDist: JitterExponential}, 1, 1, 20 / 1.1},
		{"exponential, shallow", shallowExp, 1, 1 / math.Log(1.1), 0},
		{"exponential, steep", Backend{Base: 100 * time.Millisecond, Knee: 10, Growth: 2, Latency: Exponential}, 1, 10, 100},
		{"concurrency cap below the peak", Backend{Base: 50 * time.Millisecond, Knee: 100, Latency: Linear, ConcurrencyCap: &ConcurrencyCap{Limit: 10}}, 1, 10, 200},
		{"rate cap", Backend{Base: 50 * time.Millisecond, Knee: 100, Latency: Linear, RateCap: &RateCap{Rate: 200}}, 1, 100, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, rps := tc.b.peak(tc.c)
			if math.Abs(n-tc.wantN) > 1e-9 || (tc.wantRPS > 0 && math.Abs(rps-tc.wantRPS) > 1e-6) {
				t.Errorf("peak(%v) = %v in flight, %v req/s; want %v, %v", tc.c, n, rps, tc.wantN, tc.wantRPS)
			}
			if tc.b.RateCap != nil {
				return // the scan knows nothing of rates
			}
			limit := math.Inf(1)
			if cc := tc.b.ConcurrencyCap; cc != nil {
				limit = float64(cc.Limit)
			}
			meanJ := tc.b.meanJitter()
			for x := 0.01; x <= min(5*tc.c*tc.b.Knee, limit); x += 0.01 {
				got := x / (tc.b.Base.Seconds() * tc.b.shape(x/tc.c) * meanJ)
				if got > rps*(1+1e-9) {
					t.Fatalf("at %.2f in flight the backend completes %.3f req/s, above peak's %.3f", x, got, rps)
				}
			}
		})
	}
}

func TestJitterDistributions(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    Backend
	}{
		{"lognormal", Backend{Jitter: 0.2}},
		{"exponential", Backend{Jitter: 0.2, JitterDist: JitterExponential}},
		{"none", Backend{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			const n = 200_000
			var sum, lo float64 = 0, math.Inf(1)
			for range n {
				j := tc.b.drawJitter(rng)
				sum += j
				lo = min(lo, j)
			}
			if mean := sum / n; math.Abs(mean-tc.b.meanJitter()) > 0.005 {
				t.Errorf("mean multiplier %.4f, want E[J] = %.4f", mean, tc.b.meanJitter())
			}
			if tc.b.JitterDist == JitterExponential && lo < 1 {
				t.Errorf("exponential jitter drew %v < 1", lo)
			}
		})
	}
	// One draw per request whatever the spread, so that the stream stays
	// aligned with the requests.
	a, b := rand.New(rand.NewPCG(3, 4)), rand.New(rand.NewPCG(3, 4))
	Backend{}.drawJitter(a)
	Backend{Jitter: 0.3}.drawJitter(b)
	if a.Uint64() != b.Uint64() {
		t.Error("an unjittered draw consumed a different amount of the stream")
	}
}

// The token bucket, step by step on a fixed timeline: rate 10/s, burst 2.
func TestRateCapBucket(t *testing.T) {
	b := Backend{Base: 10 * time.Millisecond, Knee: 100, Latency: Linear, RateCap: &RateCap{Rate: 10, Burst: 2}}
	s := newBackendState(&b)
	const ms = time.Millisecond
	for i, st := range []struct {
		at   time.Duration
		want fate
	}{
		{0, serve},         // 2 → 1
		{0, serve},         // 1 → 0
		{0, deferIt},       // 0
		{50 * ms, deferIt}, // 0.5
		{100 * ms, serve},  // 1 → 0
		{350 * ms, serve},  // 2.5 capped at 2 → 1
		{350 * ms, serve},  // 1 → 0
		{350 * ms, deferIt},
	} {
		got, _ := s.accept(st.at, 1, 1)
		if got != st.want {
			t.Fatalf("step %d at %v: fate %d, want %d (tokens %.2f)", i, st.at, got, st.want, s.tokens)
		}
		s.inflight = 0 // only the rate matters here
	}
}

// The concurrency cap counts what the backend is working on: served and
// deferring requests, not dropped ones.
func TestConcurrencyCapCounts(t *testing.T) {
	for _, action := range []CapAction{Defer, Drop} {
		t.Run(action.String(), func(t *testing.T) {
			b := Backend{Base: 50 * time.Millisecond, Knee: 100, Latency: Linear, ConcurrencyCap: &ConcurrencyCap{Limit: 2, Refusal: Refusal{Action: action, DeferLatency: time.Millisecond}}}
			s := newBackendState(&b)
			refused := deferIt
			if action == Drop {
				refused = dropIt
			}
			want := []fate{serve, serve, refused, refused}
			for i, w := range want {
				got, after := s.accept(0, 1, 1)
				if got != w {
					t.Fatalf("request %d: fate %d, want %d", i+1, got, w)
				}
				if got == deferIt && after != time.Millisecond {
					t.Errorf("request %d deferred after %v, want the cap's 1ms", i+1, after)
				}
			}
			wantInflight := 2
			if action == Defer {
				wantInflight = 4
			}
			if s.inflight != wantInflight {
				t.Errorf("backend counts %d in flight, want %d", s.inflight, wantInflight)
			}
		})
	}
}
