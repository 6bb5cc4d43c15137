package sim

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// GoodFactor defines a good request: one whose service latency is at most
// GoodFactor × Backend.Base, the no-load latency. It is fixed, not a scenario
// knob, so that every scenario is judged by the same bar.
const GoodFactor = 2

// Scenario is one simulation's inputs: a backend, the load offered to it, the
// queue in front of it and the controllers to compare. Times are offsets from
// the start of the run. A Scenario returned by Load or Parse is valid; one
// built in code should be checked with Validate. It is not modified by Run and
// may be shared between goroutines.
type Scenario struct {
	Name        string
	Description string
	// File is where the scenario was read from; "" when built in code.
	File string
	// Seed seeds the arrival and jitter streams. Every controller sees the
	// same arrivals and the same per-request jitter.
	Seed uint64
	// Duration is the simulated time; > 0.
	Duration time.Duration
	// Settle is the time after each change (the start, a capacity step, a
	// load step) that phase statistics leave out, so they judge controllers
	// once converged. 0 ≤ Settle.
	Settle  time.Duration
	Backend Backend
	// Load is the open-loop load: Poisson arrivals at a stepped rate. Either
	// Load or Clients is given, not both.
	// Invariant: Load[0].At == 0, At strictly increasing.
	Load []RateStep
	// Clients is the closed-loop load (see Clients); nil for open loop.
	Clients     *Clients
	Queue       Queue
	Controllers []ControllerSpec // Invariant: names unique
}

// Backend is the simulated service. A request admitted while n requests are
// at the backend (itself included) and the capacity factor is c takes
//
//	latency = Base · shape(n/c) · J
//
// where J is the request's jitter multiplier (see JitterDist) and shape is
// the Latency model's, with K = Knee and G = Growth:
//
//	quadratic    shape(x) = 1 + (x/K)²          2× Base at x = K, peak throughput there
//	linear       shape(x) = max(1, x/K)         flat to K, then each request adds Base/K and no throughput
//	exponential  shape(x) = G^max(0, x − K)     flat to K, then × G per request
//	step         shape(x) = 1 to K, 2x/K past   flat to K, then twice as slow (half the throughput) and linear
//
// Its latency is fixed when it is admitted. c scales the concurrency the
// backend absorbs: every model at capacity c behaves as at capacity 1 with
// c times fewer requests. For the quadratic model, the default, this is
// today's (Base + k·(n/c)²)·J with k = Base/Knee².
//
// The backend may also refuse work: above ConcurrencyCap or RateCap it
// answers a fast error or drops the request (see CapAction).
type Backend struct {
	Base   time.Duration // no-load latency (the median when Jitter > 0); > 0
	Knee   float64       // concurrency at which the model turns (see above) when c = 1; > 0
	Jitter float64       // spread of the latency multiplier J; 0 = none; in [0, 1]
	// Capacity steps the capacity factor c; empty means 1 throughout.
	// Invariant: Capacity[0].At == 0, At strictly increasing.
	Capacity []CapacityStep
	// Latency is the shape of latency against concurrency; the zero value
	// is Quadratic.
	Latency LatencyModel
	// Growth is the exponential model's factor per request above the knee,
	// in (1, 10]; 0 for the other models.
	Growth float64
	// JitterDist is J's distribution; the zero value is JitterLognormal.
	JitterDist JitterDist
	// ConcurrencyCap, if set, refuses a request that would take the
	// backend's concurrency above a limit.
	ConcurrencyCap *ConcurrencyCap
	// RateCap, if set, refuses requests above a rate.
	RateCap *RateCap
}

// LatencyModel is the shape of a backend's latency against its concurrency;
// see Backend.
type LatencyModel uint8

// The latency models.
const (
	Quadratic LatencyModel = iota
	Linear
	Exponential
	// Step is make bench-gate's backend (test/benchgate): the latency
	// doubles in one step past the knee, so one request past it halves
	// what the backend completes.
	Step
)

var latencyModels = []string{"quadratic", "linear", "exponential", "step"}

// String returns the model's name in a scenario file.
func (m LatencyModel) String() string { return enumName(latencyModels, int(m)) }

// JitterDist is the distribution of a request's latency multiplier J, with
// s = Backend.Jitter:
//
//	lognormal    J = exp(s·Z), Z standard normal: median 1, E[J] = exp(s²/2)
//	exponential  J = 1 + s·E, E exponential with mean 1: minimum 1, E[J] = 1 + s
//
// The exponential form is the jitter of Vector's adaptive-concurrency test
// harness: no request is faster than Base.
type JitterDist uint8

// The jitter distributions.
const (
	JitterLognormal JitterDist = iota
	JitterExponential
)

var jitterDists = []string{"lognormal", "exponential"}

// String returns the distribution's name in a scenario file.
func (d JitterDist) String() string { return enumName(jitterDists, int(d)) }

// CapAction is what a backend does with a request above one of its caps.
type CapAction uint8

const (
	// Defer answers the request with an error after a short latency (see
	// ConcurrencyCap.DeferLatency); the gate's lease is released with
	// adaptive.Error, and a closed-loop client retries. While it is being
	// answered the request counts in the backend's concurrency.
	Defer CapAction = iota
	// Drop loses the request: the backend forgets it at once and never
	// answers, so only the client's timeout ends it (adaptive.Timeout).
	// Drop needs Clients: an open-loop request has no timeout.
	Drop
)

var capActions = []string{"defer", "drop"}

// String returns the action's name in a scenario file.
func (a CapAction) String() string { return enumName(capActions, int(a)) }

func enumName(names []string, i int) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("%d", i)
}

// ConcurrencyCap refuses a request that arrives while Limit requests are at
// the backend (deferred ones being answered included, dropped ones not): as
// in Vector's harness, the (Limit+1)-th is refused.
type ConcurrencyCap struct {
	Limit int // ≥ 1
	Refusal
}

// RateCap refuses requests above Rate per second, by a token bucket: it
// holds up to Burst tokens, refills at Rate per second, and each request the
// backend accepts takes one; a request finding less than one token is
// refused. Refused requests take no token. The bucket starts full.
type RateCap struct {
	Rate  float64 // requests per second; > 0
	Burst int     // the bucket's size; 0 means max(1, ⌊Rate⌋), one second's worth
	Refusal
}

// Refusal is how a backend refuses a request above one of its caps.
type Refusal struct {
	Action CapAction
	// DeferLatency is how long a deferral takes to answer; 0 means the
	// no-load latency, Base·J, as in Vector's harness.
	DeferLatency time.Duration
}

// burst returns the bucket's size.
func (rc *RateCap) burst() float64 {
	if rc.Burst > 0 {
		return float64(rc.Burst)
	}
	return max(1, math.Floor(rc.Rate))
}

// Clients is a closed-loop load: Count clients, each with one request
// outstanding at a time. A client issues an attempt, waits for its answer or
// for Timeout, and then either thinks for Think and starts its next request
// (after an OK, or after giving up) or, after a failure (an error answer, a
// timeout, a gate rejection), retries after Backoff.Delay — up to Retries
// times per request.
//
// The work is Requests requests delivered (answered OK) in all; a client
// starts a new request only while fewer than Requests are delivered or in
// progress, and the run ends when the last is delivered. With Requests 0
// the clients work until Scenario.Duration, which also bounds a run whose
// work is unfinished.
//
// An attempt's Timeout runs from when the client issues it, so it covers
// the gate's queue and the backend. When it fires the client gives up on the
// attempt: if the attempt is queued it leaves the queue (no sample); if it
// was admitted, its lease is released with adaptive.Timeout at that instant,
// which is what a proxy sees when the downstream resets. The backend keeps
// working on an abandoned request until its latency is up (it counts in the
// backend's concurrency till then, but its answer goes nowhere), unless the
// backend dropped it.
type Clients struct {
	Count    int           // ≥ 1
	Requests int           // requests to deliver; 0: work for the whole Duration
	Timeout  time.Duration // per attempt; > 0
	Retries  int           // retries of one request after its first attempt; ≥ 0
	Backoff  Backoff
	Think    time.Duration // pause before a client's next request; ≥ 0
}

// Backoff is capped Fibonacci backoff: the wait before the k-th retry of a
// request (k = 1, 2, …) is min(Cap, Base·F(k)) with F = 1, 1, 2, 3, 5, 8, …
type Backoff struct {
	Base time.Duration // > 0
	Cap  time.Duration // ≥ Base
}

// Delay returns the wait before the k-th retry; k < 1 counts as 1.
func (b Backoff) Delay(k int) time.Duration {
	var prev, cur time.Duration = 0, b.Base // F(i−1)·Base, F(i)·Base, from i = 1
	for i := 1; i < k && cur < b.Cap; i++ {
		prev, cur = cur, prev+cur
	}
	return min(cur, b.Cap)
}

// Defaults for Clients' zero fields as a scenario file reads them.
const (
	DefaultRetries     = 3
	DefaultBackoffBase = 100 * time.Millisecond
	DefaultBackoffCap  = 5 * time.Second
)

// CapacityStep sets the backend's capacity factor from At on.
type CapacityStep struct {
	At     time.Duration
	Factor float64 // > 0; 1 is the healthy backend
}

// RateStep sets the Poisson arrival rate from At on.
type RateStep struct {
	At   time.Duration
	Rate float64 // requests per second; ≥ 0
}

// Queue is the bounded FIFO waiting room in front of the gate. A request the
// gate does not admit at once waits in it, if fewer than Max are waiting, for
// at most Timeout, and is admitted when a slot frees; it mirrors
// adaptive.GateConfig's MaxQueue and QueueTimeout (FIFO).
type Queue struct {
	Max     int           // ≥ 0; 0 rejects at once at the limit
	Timeout time.Duration // > 0 when Max > 0
}

// Kinds of controller a ControllerSpec may name.
const (
	KindStatic    = "static"
	KindGradient2 = "gradient2"
	KindAIMD      = "aimd"
	KindP95       = "p95"
	KindVegas     = "vegas"
)

var kinds = []string{KindStatic, KindGradient2, KindAIMD, KindP95, KindVegas}

// ControllerSpec names one controller to simulate and its parameters.
type ControllerSpec struct {
	// Name labels the controller's rows, files and chart panel; unique in a
	// scenario; defaults to Kind.
	Name string
	Kind string // one of static, gradient2, aimd, p95, vegas
	// MinLimit, MaxLimit and InitialLimit bound an adaptive controller; 0
	// means the adaptive package's default.
	MinLimit, MaxLimit, InitialLimit int
	// Limit is a static controller's fixed limit; ≥ 1 for static, 0 otherwise.
	Limit int
	// Params are the controller's own parameters by name (see
	// config/scenarios/README.md); values as written.
	Params map[string]Param
	Line   int // where the spec starts in File; 0 when built in code
}

// Param is one controller parameter as written.
type Param struct {
	Value string
	Line  int
}

// rateAt returns the arrival rate in force at t and when it next changes
// (end, or the scenario's duration).
func (s *Scenario) rateAt(t time.Duration) (rate float64, end time.Duration) {
	for _, st := range s.Load {
		if st.At > t {
			return rate, st.At
		}
		rate = st.Rate
	}
	return rate, s.Duration
}

// Error is one problem in a scenario. Its text is "file:line: field:
// message", where field is the YAML path (e.g. backend.capacity[1].factor).
type Error struct {
	File  string
	Line  int // 0 when unknown
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
	} else {
		b.WriteString("scenario")
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// Errors is every problem found in one scenario, reported at once.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// extended reports whether s uses closed-loop clients or a backend cap,
// whose columns its CSV then carries.
func (s *Scenario) extended() bool {
	return s.Clients != nil || s.Backend.ConcurrencyCap != nil || s.Backend.RateCap != nil
}
