package boundcheck

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The RLQS checker drives Envoys' rate_limit_quota filters
// (internal/rlqsenvoy, Envoy's side of the protocol in Envoy's order) on
// RLQS sidecars (pkg/rlqsserver, each over an engine of its own) sharing
// one store, from a schedule drawn from a seed: requests arriving at each
// Envoy, reloads that cut, raise, zero, move or rename the limit, stream
// resets and sidecar restarts. Every process reads one simulated clock
// that only the driver moves, one event at a time, so a seed replays (up
// to the order a sidecar walks its own maps in: which of two Envoys gets
// a split's odd unit, say); every window is judged
// from what the Envoys were told (the token buckets assigned to them, the
// requests their filters admitted), never from the sidecars' counters.

// RLQSWindows are the windows a schedule's limit may have. They nest (each
// divides the next), so every window boundary of a longer one is one of a
// shorter one, and a counter moved from one to another is judged on grids
// that agree.
var RLQSWindows = []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}

// RLQSPolicy is the limit an RLQS schedule's buckets count against: one
// descriptor `tenant`, each bucket ({tenant: b0}, {tenant: b1}, …) a
// counter of its own, Limit per Window.
type RLQSPolicy struct {
	// Limit is the requests per window; 0 blocks the buckets (DENY_ALL).
	Limit int64
	// Window is one of RLQSWindows.
	Window time.Duration
	// Sliding is algorithm sliding_window, not fixed_window: a counter of
	// its own.
	Sliding bool
	// Name is the limit's name: a rename keeps the counter.
	Name string
}

// Counter names the store counter p's buckets count in: the engine's
// counter id is the algorithm and the window, not the name or the limit.
func (p RLQSPolicy) Counter() string {
	algo := "fixed"
	if p.Sliding {
		algo = "sliding"
	}
	return fmt.Sprintf("%s/%v", algo, p.Window)
}

// YAML is p as a policy file of domain.
func (p RLQSPolicy) YAML(domain string) string {
	algo := ""
	if p.Sliding {
		algo = ", algorithm: sliding_window"
	}
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: tenant\n    rate_limit: {name: %s, unit: second, unit_multiplier: %d, requests_per_unit: %d%s}\n",
		domain, cmp.Or(p.Name, "l"), int(p.Window/time.Second), p.Limit, algo)
}

func (p RLQSPolicy) String() string {
	return fmt.Sprintf("%d per %s (%s)", p.Limit, p.Counter(), cmp.Or(p.Name, "l"))
}

// RLQSKind is what an RLQS step does.
type RLQSKind uint8

const (
	// RLQSRequest is one request of Bucket at Envoy, decided by its filter.
	RLQSRequest RLQSKind = iota
	// RLQSReload loads Policy on every sidecar at once.
	RLQSReload
	// RLQSReset resets Envoy's stream from its side; it reopens at its
	// next report tick.
	RLQSReset
	// RLQSRestart kills sidecar Server (its streams end, its timers die)
	// and starts a new one, empty, at the same address with the policy in
	// force.
	RLQSRestart
)

func (k RLQSKind) String() string {
	return [...]string{"request", "reload", "reset", "restart"}[k]
}

// RLQSStep is one event of an RLQS schedule.
type RLQSStep struct {
	At     time.Duration // since the schedule's start
	Kind   RLQSKind
	Envoy  int        // RLQSRequest, RLQSReset
	Bucket int        // RLQSRequest
	Server int        // RLQSRestart
	Policy RLQSPolicy // RLQSReload
}

func (s RLQSStep) String() string {
	switch s.Kind {
	case RLQSReload:
		return fmt.Sprintf("%v reload %v", s.At, s.Policy)
	case RLQSReset:
		return fmt.Sprintf("%v reset envoy=%d", s.At, s.Envoy)
	case RLQSRestart:
		return fmt.Sprintf("%v restart server=%d", s.At, s.Server)
	}
	return fmt.Sprintf("%v request envoy=%d bucket=%d", s.At, s.Envoy, s.Bucket)
}

// RLQSSchedule is a fleet of sidecars and Envoys, the policy loaded at its
// start, and its steps in time order.
type RLQSSchedule struct {
	Seed   uint64
	Policy RLQSPolicy
	// Servers is the sidecars, over one store.
	Servers int
	// Envoys holds each Envoy's sidecar: its stream goes there only.
	Envoys []int
	// Full: the Envoys start a replaced token bucket full (Envoy before
	// c33e7f82), not at the old one's remaining ratio.
	Full bool
	// AllowAll: the Envoys' no_assignment_behavior is left unset (Envoy's
	// default, ALLOW_ALL), not DENY_ALL: a bucket's first request is
	// admitted, and so is any request while nothing the sidecar sent is
	// in force. Such schedules have no resets or restarts (an Envoy
	// without a stream admits unmetered once its assignment expires).
	AllowAll bool
	// Liar, when not 0, is Envoy Liar−1, which reports 2^40 requests
	// (rlqs.MaxReportCount, all but those it allowed denied) in each of its
	// periodic reports (a legal count: a greedy or broken client): it always looks hungry, is topped up whenever the
	// window has room, and asks all of L; the bound must hold whatever
	// one Envoy reports.
	Liar int
	// Steady schedules have no reload, reset or restart and a fixed
	// window of 10 s or more: the windows where the least assigned is
	// judged.
	Steady bool
	// Length is how long the run lasts: timers fire until then.
	Length time.Duration
	Steps  []RLQSStep
}

func (sc RLQSSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rlqs seed %d: %d servers, envoys on %v, full %v, allow_all %v, liar %d, steady %v, %v, length %v\n",
		sc.Seed, sc.Servers, sc.Envoys, sc.Full, sc.AllowAll, sc.Liar, sc.Steady, sc.Policy, sc.Length)
	for i, s := range sc.Steps {
		fmt.Fprintf(&b, "  #%d %v\n", i, s)
	}
	return b.String()
}

// GoString is sc as a Go literal, to keep as a regression.
func (sc RLQSSchedule) GoString() string {
	var b strings.Builder
	pol := func(p RLQSPolicy) string {
		return fmt.Sprintf("RLQSPolicy{Limit: %d, Window: %d * time.Second, Sliding: %v, Name: %q}", p.Limit, p.Window/time.Second, p.Sliding, p.Name)
	}
	fmt.Fprintf(&b, "RLQSSchedule{Seed: %d, Policy: %s, Servers: %d, Envoys: %#v, Full: %v, AllowAll: %v, Liar: %d, Steady: %v, Length: %d * time.Second, Steps: []RLQSStep{\n",
		sc.Seed, pol(sc.Policy), sc.Servers, sc.Envoys, sc.Full, sc.AllowAll, sc.Liar, sc.Steady, sc.Length/time.Second)
	for _, s := range sc.Steps {
		switch s.Kind {
		case RLQSRequest:
			fmt.Fprintf(&b, "\t{At: %d, Kind: RLQSRequest, Envoy: %d, Bucket: %d},\n", s.At, s.Envoy, s.Bucket)
		case RLQSReload:
			fmt.Fprintf(&b, "\t{At: %d, Kind: RLQSReload, Policy: %s},\n", s.At, pol(s.Policy))
		case RLQSReset:
			fmt.Fprintf(&b, "\t{At: %d, Kind: RLQSReset, Envoy: %d},\n", s.At, s.Envoy)
		case RLQSRestart:
			fmt.Fprintf(&b, "\t{At: %d, Kind: RLQSRestart, Server: %d},\n", s.At, s.Server)
		}
	}
	b.WriteString("}}")
	return b.String()
}

// rlqsMaxRequests bounds a schedule's requests, so that a run and its
// shrinking stay short.
const rlqsMaxRequests = 1200

// GenerateRLQS draws an RLQS schedule from seed: 1–3 sidecars, 1–8 Envoys
// each on one of them, one bucket or a few, a limit of 1–120 per 5, 10 or
// 20 s window (sometimes a sliding window), 20–80 s of Poisson arrivals
// whose demand is a third to three times the limit (one Envoy often
// hotter), starting at random instants or, for a group of Envoys, together
// at a window's boundary. In two schedules of three, events: reloads (a
// cut, often to a few units, a raise, a cut to 0, a move to another window
// or algorithm, a rename), half of them in the three seconds before a
// boundary, after an Envoy's last report of the window; stream resets; a
// sidecar restart. One schedule in three has Envoys under ALLOW_ALL, drawn
// apart from the rest (a seed's other draws are what they were before),
// its resets and restarts dropped; one in four, drawn apart too, has an
// Envoy that lies about its demand (Liar).
func GenerateRLQS(seed uint64) RLQSSchedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x2545f4914f6cdd1d))
	sc := RLQSSchedule{Seed: seed, Servers: 1 + rng.IntN(3), Full: rng.IntN(3) == 0, Steady: rng.IntN(3) == 0}
	envoys := 1 + rng.IntN(8)
	for range envoys {
		sc.Envoys = append(sc.Envoys, rng.IntN(sc.Servers))
	}
	buckets := 1
	if rng.IntN(4) == 0 {
		buckets = 2 + rng.IntN(2)
	}
	p := &sc.Policy
	p.Limit = 1 + rng.Int64N(120)
	p.Name = "l0"
	if sc.Steady {
		p.Window = RLQSWindows[1+rng.IntN(2)]
		sc.Length = time.Duration(2+rng.IntN(3)) * 20 * time.Second
	} else {
		p.Window = RLQSWindows[rng.IntN(len(RLQSWindows))]
		p.Sliding = rng.IntN(5) == 0
		sc.Length = time.Duration(1+rng.IntN(4)) * 20 * time.Second
	}

	// Demand: a third to three times the limit's pace, log-uniform, split
	// among the Envoys by weight (one often hot), bounded in all.
	pace := float64(max(p.Limit, 1)) / p.Window.Seconds()
	total := pace * math.Exp(rng.Float64()*math.Log(9)) / 3
	total = min(total, rlqsMaxRequests/sc.Length.Seconds())
	weights := make([]float64, envoys)
	var sum float64
	for i := range weights {
		weights[i] = 1 + rng.Float64()
		if rng.IntN(4) == 0 {
			weights[i] *= 5
		}
		sum += weights[i]
	}
	together := -1 // the boundary a group of Envoys starts at
	if rng.IntN(3) == 0 {
		together = rng.IntN(int(sc.Length / p.Window))
	}
	for e := range envoys {
		rate := total * weights[e] / sum
		start := time.Duration(rng.Int64N(int64(sc.Length / 2)))
		if together >= 0 && rng.IntN(2) == 0 {
			start = time.Duration(together) * p.Window
		}
		bucket := rng.IntN(buckets)
		for at := start; at < sc.Length; at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) {
			if buckets > 1 && rng.IntN(3) == 0 {
				bucket = rng.IntN(buckets)
			}
			sc.Steps = append(sc.Steps, RLQSStep{At: at, Kind: RLQSRequest, Envoy: e, Bucket: bucket})
		}
	}
	if !sc.Steady {
		sc.Steps = append(sc.Steps, rlqsEvents(rng, sc)...)
	}
	if rand.New(rand.NewPCG(seed, 0xa11a11a11)).IntN(3) == 0 {
		sc.AllowAll = true
		sc.Steps = slices.DeleteFunc(sc.Steps, func(s RLQSStep) bool { return s.Kind == RLQSReset || s.Kind == RLQSRestart })
	}
	if lr := rand.New(rand.NewPCG(seed, 0x11a2)); lr.IntN(4) == 0 {
		sc.Liar = 1 + lr.IntN(envoys)
	}
	slices.SortStableFunc(sc.Steps, func(a, b RLQSStep) int { return cmp.Compare(a.At, b.At) })
	return sc
}

// rlqsEvents draws a non-steady schedule's reloads, resets and restarts.
func rlqsEvents(rng *rand.Rand, sc RLQSSchedule) []RLQSStep {
	var out []RLQSStep
	var ats []time.Duration
	for range rng.IntN(4) {
		at := time.Duration(rng.Int64N(int64(sc.Length)))
		if rng.IntN(2) == 0 { // just before a boundary: after the window's last report, often
			w := RLQSWindows[rng.IntN(len(RLQSWindows))]
			b := time.Duration(1+rng.IntN(int(sc.Length/w))) * w
			at = max(b-time.Duration(rng.Int64N(int64(3*time.Second))), 0)
		}
		ats = append(ats, at)
	}
	slices.Sort(ats)
	pol := sc.Policy
	for i, at := range ats {
		next := pol
		switch rng.IntN(6) {
		case 0, 1: // a cut, often to a few units
			next.Limit = rng.Int64N(max(pol.Limit, 1))
			if rng.IntN(2) == 0 {
				next.Limit = 1 + rng.Int64N(min(max(pol.Limit, 1), 10))
			}
		case 2: // a raise
			next.Limit = pol.Limit + 1 + rng.Int64N(120)
		case 3: // to 0
			next.Limit = 0
		case 4: // the counter moves: another window, or the other algorithm
			if rng.IntN(2) == 0 {
				next.Sliding = !pol.Sliding
			} else {
				next.Window = RLQSWindows[rng.IntN(len(RLQSWindows))]
			}
			next.Limit = rng.Int64N(2 * max(pol.Limit, 1))
		case 5: // a rename: the same counter
			next.Name = fmt.Sprintf("l%d", i+1)
		}
		out = append(out, RLQSStep{At: at, Kind: RLQSReload, Policy: next})
		pol = next
	}
	for range rng.IntN(3) {
		out = append(out, RLQSStep{At: time.Duration(rng.Int64N(int64(sc.Length))), Kind: RLQSReset, Envoy: rng.IntN(len(sc.Envoys))})
	}
	if rng.IntN(4) == 0 {
		out = append(out, RLQSStep{At: time.Duration(rng.Int64N(int64(sc.Length))), Kind: RLQSRestart, Server: rng.IntN(sc.Servers)})
	}
	return out
}
