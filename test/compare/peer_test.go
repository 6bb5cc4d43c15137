package compare

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
	"github.com/platinummonkey/go-concurrency-limits/limiter"
	"github.com/platinummonkey/go-concurrency-limits/strategy"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

var t0 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// onSample is one call of core.Limit.OnSample.
type onSample struct {
	start, rtt int64
	inflight   int
	dropped    bool
}

// recorder is a core.Limit that records its OnSample calls and holds its
// limit.
type recorder struct {
	limit int
	calls []onSample
}

func (r *recorder) EstimatedLimit() int                     { return r.limit }
func (r *recorder) NotifyOnChange(core.LimitChangeListener) {}
func (r *recorder) OnSample(start, rtt int64, inflight int, dropped bool) {
	r.calls = append(r.calls, onSample{start, rtt, inflight, dropped})
}

// release is how the peer's gRPC interceptors end a request with their
// default classifiers (grpc/option_unary.go: any error is
// ResponseTypeDropped), by the Outcome the simulator gives it.
var release = map[adaptive.Outcome]func(core.Listener){
	adaptive.OK:      core.Listener.OnSuccess,
	adaptive.Error:   core.Listener.OnDropped,
	adaptive.Timeout: core.Listener.OnDropped,
	adaptive.Dropped: core.Listener.OnDropped,
}

var outcomes = []adaptive.Outcome{adaptive.OK, adaptive.Error, adaptive.Timeout, adaptive.Dropped}

// A per-sample Peer hands every sample to OnSample as it is, dropped unless
// it is OK; with the peer's AIMD at its defaults (limit 10), a sample at
// the limit raises it by one and a drop cuts it to 9.
func TestSamplePeerOutcomes(t *testing.T) {
	for _, o := range outcomes {
		t.Run(o.String(), func(t *testing.T) {
			s := adaptive.Sample{Start: t0, RTT: 40 * time.Millisecond, Inflight: 10, Outcome: o}
			rec := &recorder{limit: 7}
			NewSamplePeer("rec", rec).Observe(t0.Add(s.RTT), s)
			want := []onSample{{t0.UnixNano(), 40e6, 10, o != adaptive.OK}}
			if !slices.Equal(rec.calls, want) {
				t.Errorf("OnSample calls %v, want %v", rec.calls, want)
			}
			wantLimit := 9
			if o == adaptive.OK {
				wantLimit = 11
			}
			p := NewSamplePeer("peer-aimd/sample", limit.NewDefaultAIMDLimit("aimd", nil))
			if got := p.Observe(t0.Add(s.RTT), s); got != wantLimit {
				t.Errorf("peer-aimd/sample at limit 10: Observe = %d, want %d", got, wantLimit)
			}
		})
	}
}

// A windowed Peer with DefaultWindow calls OnSample once per window: at the
// first sample after more than 100 RTTs, then at the first one ending a
// second (max(1 s, 2 × minimum RTT), capped at 1 s) after; a drop marks its
// window; an RTT under 100 µs is not counted.
func TestWindowedPeerDefaultWindow(t *testing.T) {
	rec := &recorder{limit: 20}
	p := NewWindowedPeer("rec", rec, DefaultWindow())
	steps := []struct {
		at       time.Duration // when the samples end
		n        int           // how many
		rtt      time.Duration
		inflight int
		o        adaptive.Outcome
		want     []onSample // calls made by the step
	}{
		{at: 100 * time.Millisecond, n: 100, rtt: 40 * time.Millisecond, inflight: 3},
		{at: 110 * time.Millisecond, n: 5, rtt: 50 * time.Microsecond, inflight: 9}, // too fast: not counted
		{at: 120 * time.Millisecond, n: 1, rtt: 30 * time.Millisecond, inflight: 5,
			want: []onSample{{0, 30e6, 5, false}}},
		{at: 200 * time.Millisecond, n: 1, rtt: 80 * time.Millisecond, inflight: 12, o: adaptive.Timeout},
		{at: 300 * time.Millisecond, n: 150, rtt: 45 * time.Millisecond, inflight: 4}, // not due till 1.12 s
		{at: 1120 * time.Millisecond, n: 1, rtt: 45 * time.Millisecond, inflight: 4},  // not after it
		{at: 1121 * time.Millisecond, n: 1, rtt: 60 * time.Millisecond, inflight: 4,
			want: []onSample{{0, 45e6, 12, true}}},
		{at: 3 * time.Second, n: 1, rtt: 45 * time.Millisecond, inflight: 4, o: adaptive.Error}, // no RTTs: never ready
		{at: 4 * time.Second, n: 100, rtt: 45 * time.Millisecond, inflight: 4},
		{at: 4 * time.Second, n: 1, rtt: 45 * time.Millisecond, inflight: 4,
			want: []onSample{{0, 45e6, 4, true}}},
	}
	for i, st := range steps {
		before := len(rec.calls)
		for range st.n {
			now := t0.Add(st.at)
			p.Observe(now, adaptive.Sample{Start: now.Add(-st.rtt), RTT: st.rtt, Inflight: st.inflight, Outcome: st.o})
		}
		if got := rec.calls[before:]; !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%d × %v at %v): OnSample calls %v, want %v", i, st.n, st.o, st.at, got, st.want)
		}
	}
}

// A windowed Peer calls OnSample when the peer's own DefaultLimiter would,
// with the same in-flight count and drop flag, for every Outcome released
// as its gRPC interceptors release it. The limiter runs on the wall clock,
// so its windows are made as short as it allows (1 ns, 10 RTTs) and its
// RTTs, which the test cannot set, are not compared.
func TestWindowedPeerMatchesDefaultLimiter(t *testing.T) {
	w := Window{MinTime: 1, MaxTime: 1, MinRTT: 0, Size: 10}
	theirs := &recorder{limit: 1000}
	lim, err := limiter.NewDefaultLimiter(theirs, w.MinTime.Nanoseconds(), w.MaxTime.Nanoseconds(), w.MinRTT.Nanoseconds(), w.Size,
		strategy.NewSimpleStrategy(1000), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ours := &recorder{limit: 1000}
	p := NewWindowedPeer("rec", ours, w)

	// Each round admits its requests together (in flight 1, 2, …) and
	// releases them in order with the round's outcomes.
	rep := func(o adaptive.Outcome, n int) []adaptive.Outcome { return slices.Repeat([]adaptive.Outcome{o}, n) }
	rounds := [][]adaptive.Outcome{
		rep(adaptive.OK, 12),
		slices.Concat(rep(adaptive.OK, 5), rep(adaptive.Timeout, 1), rep(adaptive.OK, 6)),
		rep(adaptive.Error, 15),
		slices.Concat(rep(adaptive.Dropped, 1), rep(adaptive.OK, 11)),
		slices.Concat(rep(adaptive.OK, 3), rep(adaptive.Error, 2)),
		rep(adaptive.OK, 20),
		slices.Concat(rep(adaptive.Timeout, 2), rep(adaptive.OK, 9), rep(adaptive.Error, 1), rep(adaptive.OK, 4)),
	}
	now := t0
	for r, round := range rounds {
		listeners := make([]core.Listener, len(round))
		for i := range round {
			l, ok := lim.Acquire(context.Background())
			if !ok {
				t.Fatalf("round %d: DefaultLimiter refused request %d", r, i+1)
			}
			listeners[i] = l
		}
		for i, o := range round {
			release[o](listeners[i])
			now = now.Add(time.Millisecond)
			rtt := time.Duration(10+i) * time.Millisecond
			p.Observe(now, adaptive.Sample{Start: now.Add(-rtt), RTT: rtt, Inflight: i + 1, Outcome: o})
		}
	}
	strip := func(calls []onSample) []onSample {
		out := slices.Clone(calls)
		for i := range out {
			out[i].rtt = 0
		}
		return out
	}
	if len(theirs.calls) < 4 {
		t.Fatalf("DefaultLimiter made %d OnSample calls; the script should close at least 4 windows", len(theirs.calls))
	}
	if got, want := strip(ours.calls), strip(theirs.calls); !slices.Equal(got, want) {
		t.Errorf("windowed Peer's OnSample calls (RTT left out)\n%v\nDefaultLimiter's\n%v", got, want)
	}
}
