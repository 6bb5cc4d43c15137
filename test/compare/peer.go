package compare

import (
	"math"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/measurements"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

// Window is how the peer's limiter.DefaultLimiter (limiter/default.go, the
// limiter under all of the peer's others and its gRPC interceptors) batches
// samples before it calls its algorithm's OnSample: once per window, with
// the window's minimum RTT, its largest in-flight count and whether any
// request in it was dropped.
//
// A window closes at the first sample (an RTT or a drop) that ends after
// the close of the window before it plus min(max(2 × its minimum RTT,
// MinTime), MaxTime), if it then holds more than Size RTT samples.
type Window struct {
	MinTime, MaxTime time.Duration
	// MinRTT is the shortest RTT that counts: a success faster than this
	// is ignored (a drop always counts).
	MinRTT time.Duration
	Size   int // RTT samples a window needs beyond Size to close
}

// DefaultWindow returns the windowing the peer's
// NewDefaultLimiterWithDefaults and gRPC interceptors use: 1 s, 1 s,
// 100 µs and 100 samples.
func DefaultWindow() Window {
	return Window{MinTime: time.Second, MaxTime: time.Second, MinRTT: 100 * time.Microsecond, Size: 100}
}

// Peer is an adaptive.Controller around one of the peer's limit algorithms
// (a core.Limit), fed in the time of the samples rather than the wall
// clock's, in one of two ways:
//
//   - windowed (NewWindowedPeer), as the peer's limiter.DefaultLimiter feeds
//     it: the algorithm hears of a window when it closes (see Window), as
//     OnSample(0, the window's minimum RTT, its largest in flight, dropped);
//   - per sample (NewSamplePeer), as the Java original's AbstractLimiter
//     feeds it: OnSample(start, RTT, in flight, dropped) for every sample.
//
// Each Outcome is released as the peer's gRPC interceptors release a
// request with their default classifiers, which classify any error as
// dropped:
//
//	adaptive.OK                         Listener.OnSuccess: an RTT sample
//	any other (Error, Timeout, Dropped) Listener.OnDropped: a drop
//
// (Listener.OnIgnore, which discards a request without a sample, is only
// reached through a custom classifier.) Windowed, a drop marks its window
// dropped and adds no RTT; per sample, it carries its RTT, as in Java.
//
// A Peer is not safe for concurrent use, as adaptive.Controller requires of
// none; it reads no clock, though the algorithm it wraps may draw on
// math/rand's global source (see Algorithm).
type Peer struct {
	name  string
	limit core.Limit
	// window is nil for a per-sample Peer.
	window *Window
	sample *measurements.ImmutableSampleWindow // the open window
	// next is DefaultLimiter's nextUpdateTime, in Unix nanoseconds: the
	// open window closes at the first sample that ends after it.
	next int64
}

var _ adaptive.Controller = (*Peer)(nil)

// NewWindowedPeer returns a Peer named name (its Name) that feeds limit
// through w.
func NewWindowedPeer(name string, limit core.Limit, w Window) *Peer {
	return &Peer{name: name, limit: limit, window: &w, sample: emptyWindow()}
}

// NewSamplePeer returns a Peer named name (its Name) that feeds limit every
// sample.
func NewSamplePeer(name string, limit core.Limit) *Peer {
	return &Peer{name: name, limit: limit}
}

// emptyWindow is the window DefaultLimiter opens after each close; its start
// time, which nothing reads, is left at -1 so that no clock is read.
func emptyWindow() *measurements.ImmutableSampleWindow {
	return measurements.NewImmutableSampleWindow(-1, 0, 0, 0, 0, false)
}

// Observe hands s, which ended at now, to the algorithm, or records it in
// the open window and closes the window if it is due; it returns the
// algorithm's limit.
func (p *Peer) Observe(now time.Time, s adaptive.Sample) int {
	if p.window == nil {
		p.limit.OnSample(s.Start.UnixNano(), s.RTT.Nanoseconds(), s.Inflight, s.Outcome != adaptive.OK)
		return p.Limit()
	}
	// The windows' start times are stored, never read: 0 keeps
	// ImmutableSampleWindow from reading the wall clock for them (it does
	// for a negative one, as DefaultLimiter passes).
	switch {
	case s.Outcome != adaptive.OK:
		p.sample = p.sample.AddDroppedSample(0, s.Inflight)
	case s.RTT < p.window.MinRTT:
		return p.Limit() // DefaultListener.OnSuccess returns before the window
	default:
		p.sample = p.sample.AddSample(0, s.RTT.Nanoseconds(), s.Inflight)
	}
	p.closeWindow(now.UnixNano())
	return p.Limit()
}

// closeWindow is DefaultListener.updateLimit: if a sample ending at end
// closes the open window, it opens the next and hands the closed one to the
// algorithm.
func (p *Peer) closeWindow(end int64) {
	cur := p.sample
	if end <= p.next || cur.CandidateRTTNanoseconds() == math.MaxInt64 || cur.SampleCount() <= p.window.Size {
		return
	}
	p.sample = emptyWindow()
	p.next = end + min(max(2*cur.CandidateRTTNanoseconds(), p.window.MinTime.Nanoseconds()), p.window.MaxTime.Nanoseconds())
	p.limit.OnSample(0, cur.CandidateRTTNanoseconds(), cur.MaxInFlight(), cur.DidDrop())
}

// Limit returns the algorithm's estimated limit, at least 1. The peer's
// algorithms keep their own bounds (see Algorithm), which need not be
// adaptive's defaults.
func (p *Peer) Limit() int { return max(1, p.limit.EstimatedLimit()) }

// Name returns the name the Peer was made with, e.g. "peer-gradient2".
func (p *Peer) Name() string { return p.name }
