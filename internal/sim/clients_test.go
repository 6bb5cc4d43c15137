package sim

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second}
	want := []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for k, w := range want {
		if got := b.Delay(k + 1); got != w {
			t.Errorf("Delay(%d) = %v, want %v", k+1, got, w)
		}
	}
	for _, tc := range []struct {
		name string
		b    Backoff
		k    int
		want time.Duration
	}{
		{"k below 1 is the first", b, 0, 100 * time.Millisecond},
		{"a huge k stays at the cap", Backoff{Base: time.Nanosecond, Cap: time.Hour}, 1_000_000, time.Hour},
		{"base at the cap", Backoff{Base: time.Second, Cap: time.Second}, 5, time.Second},
		{"the cap is not a Fibonacci multiple", Backoff{Base: 100 * time.Millisecond, Cap: 250 * time.Millisecond}, 4, 250 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Delay(tc.k); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.k, got, tc.want)
			}
		})
	}
}

// flat is a backend with latency base up to 100 in flight and no jitter.
func flat(base time.Duration) Backend {
	return Backend{Base: base, Knee: 100, Latency: Linear, Capacity: []CapacityStep{{0, 1}}}
}

// closedLoop returns a valid scenario of one static controller.
func closedLoop(t *testing.T, b Backend, c Clients, limit int, dur time.Duration) *Scenario {
	t.Helper()
	sc := &Scenario{
		Name: "closed", Seed: 1, Duration: dur, Backend: b, Clients: &c,
		Controllers: []ControllerSpec{{Name: "static", Kind: KindStatic, Limit: limit}},
	}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

func mustRun(t *testing.T, sc *Scenario) *Result {
	t.Helper()
	res, err := Run(sc, sc.Controllers[0])
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A hand-checked closed loop: 3 clients, a static limit of 3 and a backend
// that defers above 2 in flight, no jitter, no retries. Every 100 ms two
// requests are answered OK and the third with an error; after 400 ms only 2
// requests remain, so the third client stays idle, and the 10th delivery is
// at 500 ms. In flight: 3 for 400 ms, then 2 for 100 ms.
func TestClosedLoopByHand(t *testing.T) {
	b := flat(100 * time.Millisecond)
	b.ConcurrencyCap = &ConcurrencyCap{Limit: 2}
	sc := closedLoop(t, b, Clients{Count: 3, Requests: 10, Timeout: time.Second, Retries: 0, Backoff: Backoff{Base: time.Millisecond, Cap: time.Millisecond}}, 3, 10*time.Second)
	sc.Settle = 250 * time.Millisecond
	st := mustRun(t, sc).Stats
	want := Stats{
		End: 500 * time.Millisecond, Finished: true,
		Requests: 14, Attempts: 14, Delivered: 10, Failed: 4, OK: 10, Errors: 4, Good: 10,
		MeanLatency: 100 * time.Millisecond, P50: 100 * time.Millisecond, P99: 100 * time.Millisecond, P99EndToEnd: 100 * time.Millisecond,
	}
	got := st
	got.Throughput, got.Goodput, got.LatencyRatio = 0, 0, 0
	got.Levels, got.Settled = Levels{}, Levels{}
	if got != want {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}
	if st.MaxInflight != 3 || st.MaxLimit != 3 || st.MaxBackend != 3 {
		t.Errorf("maxima %+v, want 3 in flight, limit 3, 3 at the backend", st.Levels)
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"mean in flight", st.MeanInflight, (3*0.4 + 2*0.1) / 0.5},
		{"mean limit", st.MeanLimit, 3},
		{"mean at the backend", st.MeanBackend, 2.8},
		{"settled in flight (from 250ms)", st.Settled.MeanInflight, (3*0.15 + 2*0.1) / 0.25},
		{"latency/base", st.LatencyRatio, 1},
		{"throughput", st.Throughput, 20},
	} {
		if math.Abs(f.got-f.want) > 1e-9 {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
}

// A client that gives up: the backend (300 ms, flat) outlasts the client's
// 200 ms timeout every time. Attempts at 0, 300 (after 100 ms of backoff),
// 600 (after 100 ms) give up at 200, 500 and 800, failing the request; the
// next request's first attempt at 800 is pending at the end, 900 ms. The
// backend keeps working on each abandoned attempt to its 300 ms, so at 800
// it holds two.
func TestClientTimeoutByHand(t *testing.T) {
	sc := closedLoop(t, flat(300*time.Millisecond), Clients{Count: 1, Timeout: 200 * time.Millisecond, Retries: 2, Backoff: Backoff{Base: 100 * time.Millisecond, Cap: time.Second}}, 1, 900*time.Millisecond)
	rec := &recorder{Controller: NewStatic(1)}
	res, err := RunWith(sc, "recorded", rec)
	if err != nil {
		t.Fatal(err)
	}
	st := res.Stats
	if st.Requests != 2 || st.Attempts != 4 || st.Retries != 2 || st.Timeouts != 3 || st.Failed != 1 || st.Pending != 1 || st.OK != 0 {
		t.Errorf("stats %+v: want 2 requests, 4 attempts, 2 retries, 3 timeouts, 1 failed, 1 pending", st)
	}
	if math.Abs(st.MeanInflight-700.0/900) > 1e-9 || math.Abs(st.MeanBackend-1000.0/900) > 1e-9 || st.MaxBackend != 2 || st.MaxInflight != 1 {
		t.Errorf("in flight %.4f (max %d), backend %.4f (max %d); want 0.7778 (1), 1.1111 (2)", st.MeanInflight, st.MaxInflight, st.MeanBackend, st.MaxBackend)
	}
	if res.Kind != KindStatic || res.Controller != "recorded" {
		t.Errorf("RunWith labelled the result %q, %q", res.Controller, res.Kind)
	}
	if len(rec.samples) != 3 {
		t.Fatalf("the controller heard %d samples, want the 3 timeouts", len(rec.samples))
	}
	for i, s := range rec.samples {
		if s.Outcome != adaptive.Timeout || s.RTT != 200*time.Millisecond {
			t.Errorf("sample %d: %v after %v, want timeout after 200ms", i, s.Outcome, s.RTT)
		}
	}
}

// recorder is a Controller that records what it is told.
type recorder struct {
	adaptive.Controller
	samples []adaptive.Sample
}

func (r *recorder) Observe(now time.Time, s adaptive.Sample) int {
	r.samples = append(r.samples, s)
	return r.Controller.Observe(now, s)
}

// A static limit on each shape of backend does what the shape says.
func TestStaticOnEachShape(t *testing.T) {
	clients := Clients{Count: 40, Timeout: time.Second, Retries: 3, Backoff: Backoff{Base: 50 * time.Millisecond, Cap: time.Second}}
	withCap := func(action CapAction) Backend {
		b := flat(50 * time.Millisecond)
		b.ConcurrencyCap = &ConcurrencyCap{Limit: 10, Refusal: Refusal{Action: action}}
		return b
	}
	withRate := flat(50 * time.Millisecond)
	withRate.RateCap = &RateCap{Rate: 200}
	for _, tc := range []struct {
		name    string
		b       Backend
		limit   int
		check   func(st Stats) bool
		explain string
	}{
		{"defer cap: at the cap, no errors", withCap(Defer), 10, func(st Stats) bool { return st.Errors == 0 && math.Abs(st.Throughput-200) < 2 }, "0 errors, 200 req/s"},
		{"defer cap: above it, errors", withCap(Defer), 12, func(st Stats) bool { return st.Errors > 100 }, "errors"},
		{"drop cap: at the cap, no timeouts", withCap(Drop), 10, func(st Stats) bool { return st.Timeouts == 0 && st.Dropped == 0 }, "no timeouts"},
		{"drop cap: above it, timeouts of dropped requests", withCap(Drop), 12, func(st Stats) bool {
			return st.Timeouts > 0 && st.Timeouts <= st.Dropped && st.MaxBackend == 10
		}, "timeouts, of dropped requests; backend ≤ 10"},
		{"rate cap: at the equilibrium, no errors", withRate, 9, func(st Stats) bool { return st.Errors == 0 }, "no errors"},
		{"rate cap: above it, errors and 200 req/s", withRate, 20, func(st Stats) bool { return st.Errors > 100 && st.OK <= 2000+200 && st.OK >= 1980 }, "errors, and 200 req/s plus the first burst"},
		{"linear: at the knee, base latency", linear4, 4, func(st Stats) bool { return math.Abs(st.Throughput-80) < 1 && math.Abs(st.LatencyRatio-1) < 1e-9 }, "80 req/s at 1× base"},
		{"linear: twice the knee, no more throughput", linear4, 8, func(st Stats) bool { return math.Abs(st.Throughput-80) < 1 && math.Abs(st.LatencyRatio-2) < 0.01 }, "80 req/s at 2× base"},
		{"exponential: at the knee", shallowExp, 10, func(st Stats) bool { return math.Abs(st.Throughput-100) < 1 }, "100 req/s"},
		{"exponential: twice the knee, less", shallowExp, 20, func(st Stats) bool { return math.Abs(st.Throughput-20/(0.1*math.Pow(1.1, 10))) < 1 }, "77 req/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := mustRun(t, closedLoop(t, tc.b, clients, tc.limit, 10*time.Second)).Stats
			if !tc.check(st) {
				t.Errorf("want %s; got %+v", tc.explain, st)
			}
		})
	}
}

// newScenarios are the shipped closed-loop scenarios of issue #15.
var newScenarios = []string{"defer-cap", "drop-cap", "rate-cap", "linear", "exp-knee", "quadratic-knee"}

// Every attempt ends exactly once, every request is delivered, failed or in
// progress, and the rows add up to the totals, for every controller of
// every closed-loop scenario (cut to 20 s to stay quick).
func TestClosedLoopAccounting(t *testing.T) {
	t.Parallel()
	for _, name := range newScenarios {
		sc, err := Load(filepath.Join(scenarioDir, name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		sc.Duration = min(sc.Duration, 20*time.Second)
		results, err := RunAll(sc)
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range results {
			st := res.Stats
			where := name + "/" + res.Controller
			if st.Pending < 0 || st.Attempts != st.OK+st.Errors+st.Timeouts+st.Rejected+st.Pending {
				t.Errorf("%s: %d attempts ≠ %d ok + %d errors + %d timeouts + %d rejected + %d pending",
					where, st.Attempts, st.OK, st.Errors, st.Timeouts, st.Rejected, st.Pending)
			}
			if st.Attempts != st.Requests+st.Retries || st.OK != st.Delivered {
				t.Errorf("%s: %d attempts ≠ %d requests + %d retries, or %d OK ≠ %d delivered", where, st.Attempts, st.Requests, st.Retries, st.OK, st.Delivered)
			}
			if inProgress := st.Requests - st.Delivered - st.Failed; inProgress < 0 || inProgress > sc.Clients.Count || (st.Finished && inProgress != 0) {
				t.Errorf("%s: %d requests − %d delivered − %d failed leaves %d in progress", where, st.Requests, st.Delivered, st.Failed, inProgress)
			}
			if st.Finished != (st.Delivered == sc.Clients.Requests) || st.Delivered > sc.Clients.Requests {
				t.Errorf("%s: finished %v with %d of %d delivered", where, st.Finished, st.Delivered, sc.Clients.Requests)
			}
			var sum Row
			for _, r := range res.Rows {
				sum.Arrived += r.Arrived
				sum.Completed += r.Completed
				sum.Errors += r.Errors
				sum.ClientTimeouts += r.ClientTimeouts
				sum.Retries += r.Retries
				sum.Rejected += r.Rejected + r.TimedOut
			}
			last := res.Rows[len(res.Rows)-1]
			pending := last.Queued + last.Inflight
			if sum.Arrived != st.Attempts || sum.Completed != st.OK || sum.Errors != st.Errors || sum.ClientTimeouts != st.Timeouts ||
				sum.Retries != st.Retries || sum.Rejected != st.Rejected || pending != st.Pending {
				t.Errorf("%s: rows sum to %+v, pending %d; stats %+v", where, sum, pending, st)
			}
			if st.MaxInflight > st.MaxLimit && res.Kind == KindStatic {
				t.Errorf("%s: %d in flight above the static limit %d", where, st.MaxInflight, st.MaxLimit)
			}
		}
	}
}

// A closed loop is deterministic: the same seed gives the same CSV (with
// the closed loop's columns) and Stats; another seed differs.
func TestClosedLoopDeterministic(t *testing.T) {
	t.Parallel()
	load := func(seed uint64) (*Scenario, []*Result) {
		sc, err := Load(filepath.Join(scenarioDir, "quadratic-knee.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		sc.Seed, sc.Duration = seed, 15*time.Second
		res, err := RunAll(sc)
		if err != nil {
			t.Fatal(err)
		}
		return sc, res
	}
	csv := func(r *Result) []byte {
		var b bytes.Buffer
		if err := WriteCSV(&b, r); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	sc, first := load(1)
	_, again := load(1)
	_, other := load(2)
	for i, r := range first {
		if !bytes.Equal(csv(r), csv(again[i])) || r.Stats != again[i].Stats {
			t.Errorf("%s: two runs with seed 1 differ", r.Controller)
		}
		if bytes.Equal(csv(r), csv(other[i])) {
			t.Errorf("%s: seeds 1 and 2 wrote the same CSV", r.Controller)
		}
		if !bytes.HasPrefix(csv(r), []byte(strings.TrimSuffix(csvHeader, "\n")+csvExtended+"\n")) {
			t.Errorf("%s: CSV header lacks the closed loop's columns", r.Controller)
		}
	}
	var sum bytes.Buffer
	if err := WriteSummary(&sum, sc, first); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"closed loop, 100 clients", "whole run", "latency/base", "aimd"} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
}

func TestRunWithNil(t *testing.T) {
	sc := mustParse(t, shortScenario)
	if _, err := RunWith(sc, "none", nil); err == nil {
		t.Error("RunWith accepted a nil controller")
	}
}

// The closed loop's and the caps' fields give file:line: field: message.
func TestParseClosedLoopErrors(t *testing.T) {
	const closed = `name: t
duration: 60s
backend:
  base_latency: 50ms
  knee: 10
clients:
  count: 10
  timeout: 1s
controllers:
  - kind: gradient2
`
	sub := func(old, new string) string { return strings.Replace(closed, old, new, 1) }
	if sc, err := Parse("ok.yaml", []byte(closed)); err != nil {
		t.Fatal(err)
	} else if c := sc.Clients; c.Retries != DefaultRetries || c.Backoff != (Backoff{DefaultBackoffBase, DefaultBackoffCap}) {
		t.Errorf("clients defaults not applied: %+v", c)
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"both loads", closed + "load: [{at: 0s, rate: 5}]\n", "bad.yaml:6: clients: give either load (open-loop arrivals) or clients"},
		{"no clients count", sub("  count: 10\n", ""), "bad.yaml:6: clients.count: must be the number of clients"},
		{"no timeout", sub("  timeout: 1s\n", ""), "bad.yaml:6: clients.timeout: must be a positive duration"},
		{"clients a list", sub("clients:\n  count: 10\n  timeout: 1s", "clients: [1]"), "bad.yaml:6: clients: the clients must be a mapping"},
		{"unknown client field", sub("  count: 10", "  count: 10\n  rate: 3"), "bad.yaml:8: clients.rate: unknown field in the clients; the fields are count,"},
		{"negative retries", sub("  count: 10", "  count: 10\n  retries: -1"), "bad.yaml:8: clients.retries: must lie in [0, 1000]"},
		{"backoff cap below base", sub("  count: 10", "  count: 10\n  backoff: {base: 1s, cap: 10ms}"), "bad.yaml:8: clients.backoff.cap: must lie in [base, 1h0m0s]"},
		{"backoff without unit", sub("  count: 10", "  count: 10\n  backoff: {base: 5}"), `bad.yaml:8: clients.backoff.base: must be a duration with a unit`},
		{"unknown model", sub("knee: 10", "knee: 10\n  latency: cubic"), `bad.yaml:6: backend.latency: must be one of quadratic, linear, exponential, step, not "cubic"`},
		{"exponential without growth", sub("knee: 10", "knee: 10\n  latency: exponential"), "bad.yaml:3: backend.growth: latency: exponential needs growth"},
		{"growth on quadratic", sub("knee: 10", "knee: 10\n  growth: 1.1"), "bad.yaml:6: backend.growth: applies only to latency: exponential"},
		{"unknown jitter", sub("knee: 10", "knee: 10\n  jitter_dist: pareto"), `bad.yaml:6: backend.jitter_dist: must be one of lognormal, exponential`},
		{"cap without limit", sub("knee: 10", "knee: 10\n  concurrency_cap: {action: drop}"), "bad.yaml:6: backend.concurrency_cap.limit: must be the most requests"},
		{"unknown action", sub("knee: 10", "knee: 10\n  concurrency_cap: {limit: 5, action: shed}"), `bad.yaml:6: backend.concurrency_cap.action: must be one of defer, drop, not "shed"`},
		{"drop in open loop", "name: t\nduration: 60s\nbackend:\n  base_latency: 50ms\n  knee: 10\n  rate_cap: {rate: 5, action: drop}\nload: [{at: 0s, rate: 5}]\ncontrollers: [{kind: aimd}]\n",
			"bad.yaml:6: backend.rate_cap.action: drop needs clients"},
		{"zero rate", sub("knee: 10", "knee: 10\n  rate_cap: {rate: 0}"), "bad.yaml:6: backend.rate_cap.rate: must be requests per second in (0, 100000]"},
		{"negative defer latency", sub("knee: 10", "knee: 10\n  rate_cap: {rate: 5, defer_latency: -1s}"), "bad.yaml:6: backend.rate_cap.defer_latency: must lie in [0, 24h0m0s]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nlacks\n%s", err, tc.want)
			}
		})
	}
}
