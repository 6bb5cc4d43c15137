package compare

import (
	"errors"
	"math/rand"
	"sync"

	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
)

// Algorithm is one of the peer's limit algorithms, built with the defaults
// its constructors give. A sample, in Defaults, is one OnSample call: a
// window of requests windowed, one request per sample (see Feeding).
type Algorithm struct {
	Name string // the Peer's name, e.g. "peer-gradient2"
	// Constructor names the peer's function New calls, and Defaults the
	// parameters it sets, for the report.
	Constructor, Defaults string
	// New returns a fresh limit. peer-gradient and peer-vegas draw from
	// math/rand's global source (see seedPeers).
	New func() core.Limit
}

// Algorithms returns the peer's adaptive limit algorithms. The rest of its
// limit package are FixedLimit and SettableLimit (constants), TracedLimit
// (a logging decorator) and WindowedLimit, a decorator that windows samples
// as DefaultLimiter does but ignores RTTs under 100 ms by default, so it
// would ignore every sample here.
func Algorithms() []Algorithm {
	return []Algorithm{
		{
			Name: "peer-gradient2", Constructor: "NewDefaultGradient2Limit",
			Defaults: "initial 20, min 20, max 200; queue size 4, smoothing 0.2, long-term RTT an exponential average over 600 samples (10 to warm up); grows only at ≥ limit/2 in flight; ignores drops",
			New: func() core.Limit {
				return limit.NewDefaultGradient2Limit("peer-gradient2", nil, nil)
			},
		},
		{
			// No NewDefault*: every argument out of range takes the
			// constructor's default, as the library's own
			// TestGradientLimit/Default does.
			Name: "peer-gradient", Constructor: "NewGradientLimitWithRegistry(…, 0, 0, 0, -1, nil, -1, 0, …)",
			Defaults: "initial 50, min 1, max 1000; smoothing 0.2 (downward only), queue size max(4, √limit), RTT tolerance 2; new limit = limit × gradient × queue size; halves (smoothed) on a drop; no-load RTT probe every 1000 + rand.Int() samples (never, in effect)",
			New: func() core.Limit {
				return limit.NewGradientLimitWithRegistry("peer-gradient", 0, 0, 0, -1, nil, -1, 0, nil, nil)
			},
		},
		{
			Name: "peer-vegas", Constructor: "NewDefaultVegasLimit",
			Defaults: "initial 20, min 1, max 1000; smoothing 1; with m = max(1, ⌊log10 limit⌋): alpha 3m, beta 6m, threshold m, steps of m, −m on a drop; grows only at ≥ limit/2 in flight; no-load RTT re-probed every 30 × U[0.5, 1) × limit samples",
			New: func() core.Limit {
				return limit.NewDefaultVegasLimit("peer-vegas", nil, nil)
			},
		},
		{
			Name: "peer-aimd", Constructor: "NewDefaultAIMDLimit",
			Defaults: "initial 10, min 1, no max; +1 per sample at ≥ limit in flight, ×0.9 (at least −1) per drop; no latency signal",
			New: func() core.Limit {
				return limit.NewDefaultAIMDLimit("peer-aimd", nil)
			},
		},
	}
}

// Feeding is how a Peer hands samples to its algorithm (see Peer).
type Feeding uint8

const (
	// Windowed is the peer's own limiter.DefaultLimiter: NewWindowedPeer
	// with DefaultWindow.
	Windowed Feeding = iota
	// PerSample is every sample to OnSample, as the Java original's
	// AbstractLimiter does: NewSamplePeer.
	PerSample
)

// feedings lists the Feedings, windowed first.
var feedings = []Feeding{Windowed, PerSample}

// PeerName is the name of a's Peer fed by f: a.Name windowed, and
// a.Name + "/sample" per sample.
func (a Algorithm) PeerName(f Feeding) string {
	if f == PerSample {
		return a.Name + "/sample"
	}
	return a.Name
}

// newPeer returns a fresh Peer of a fed by f. Vegas draws from math/rand's
// global source as it is made: the caller holds peerMu, seeded.
func (a Algorithm) newPeer(f Feeding) *Peer {
	if f == PerSample {
		return NewSamplePeer(a.PeerName(f), a.New())
	}
	return NewWindowedPeer(a.PeerName(f), a.New(), DefaultWindow())
}

// ErrUnseeded is returned by a peer run when math/rand.Seed is a no-op in
// the running binary (Go 1.24 on, unless GODEBUG randseednop=0, which this
// module's go.mod sets for its commands and tests).
var ErrUnseeded = errors.New("compare: math/rand.Seed has no effect (GODEBUG randseednop=0 is not in force), so peer runs would not be reproducible")

// peerMu serialises the peer runs, which share math/rand's global source.
var peerMu sync.Mutex

// seedPeers seeds math/rand's global source with seed, from which
// peer-vegas draws its probe jitter (at construction and at every probe)
// and peer-gradient its probe countdown: with nothing else drawing from it,
// a run seeded alike then repeats exactly. Seed is deprecated, but the
// peer reads no other source. The caller must hold peerMu until its run is
// done.
func seedPeers(seed uint64) error {
	rand.Seed(int64(seed))
	first := rand.Int63()
	rand.Seed(int64(seed))
	if rand.Int63() != first {
		return ErrUnseeded
	}
	rand.Seed(int64(seed))
	return nil
}
