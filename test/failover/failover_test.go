package failover

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

var failoverRuns = flag.Int("failover-runs", 0, "runs of each TestFailover scenario, all three of them; 0 (the default) runs the short form: kill and cut_then_kill_wait1 once each")

// The policy: one rule per mode, each limiting its own descriptor key to
// limit per hour (one window for the whole run: requests are stamped from
// a fixed timeline), leased ones in batches of batch, all with
// on_store_error: error, so that an answer on_store_error decided is told
// apart and admits nothing.
const (
	domain = "failover"
	limit  = 1000
	batch  = 20
)

// modes are the rules' descriptor keys; no one is a substring of another,
// so a store key names one (countingStore).
var modes = []string{"strict", "cached_deny", "leased_coupled", "leased_uncoupled", "fair"}

func policyYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", domain)
	for _, m := range modes {
		// Fixed windows, the default: strict and cached_deny checks go
		// through the fixed-window script, several checks a call.
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: hour, requests_per_unit: %d}\n    on_store_error: error\n", m, limit)
		switch m {
		case "cached_deny":
			b.WriteString("    mode: cached_deny\n")
		case "leased_coupled":
			fmt.Fprintf(&b, "    mode: leased\n    lease: {batch: %d}\n", batch)
		case "leased_uncoupled":
			fmt.Fprintf(&b, "    mode: leased\n    lease: {batch: %d, window_coupled: false}\n", batch)
		case "fair":
			fmt.Fprintf(&b, "    fairness: {tenant_key: %s}\n", m)
		}
	}
	return b.String()
}

// The fleet and its traffic.
const (
	nodes          = 2
	callersPerRule = 2 // per node
	// storeTimeout is the engine's (--store-timeout); the client's and the
	// store's timeouts derive from it as cmd/sidecar derives them. 100ms,
	// not the sidecar's 50ms, so that a loaded 2-core machine under -race
	// does not time out healthy calls.
	storeTimeout = 100 * time.Millisecond
	// warmAdmissions: each rule has admitted this many before the cut or
	// the kill (well under limit, so the window is open when it happens).
	warmAdmissions = 100
	// afterCut: strict answers after CutReplication before the kill.
	afterCut = 30
	// rediscoverWithin bounds how long after the store is ready again —
	// the sentinels agree on the new primary and, with WAIT, a replica of
	// it is in sync — a rule may go on answering store errors: the
	// client's rediscovery, the product's part of the outage, less the
	// time the probe saw the process stalled (stallProbe). How long the
	// sentinels take to promote (down-after 0.5s + their vote) and a
	// replica to resync is Redis's, measured and reported, not judged:
	// on a loaded machine a sentinel's hello and a replica's sync stretch
	// to tens of seconds.
	rediscoverWithin = 2 * time.Second
	// latencyMargin is what an answer may take beyond storeTimeout while
	// the process could run (the probe's stalls are not counted): the
	// client's and the engine's own work after the deadline.
	latencyMargin = 250 * time.Millisecond
	// exhaustedRun is how many denials in a row, timeouts aside, show a
	// rule's window used up.
	exhaustedRun = 20
)

// scenario is one way the primary dies.
type scenario struct {
	name string
	// cut: the replicas' links are cut (testenv CutReplication) and strict
	// answers afterCut times before the kill: the writes in between are
	// lost for certain, as in a partition or a lagging replica.
	cut bool
	// wait is redisstore's WaitReplicas.
	wait int
	// long: only with -failover-runs (it asserts nothing the others do
	// not; it measures what WAIT prevents).
	long bool
}

var scenarios = []scenario{
	{name: "kill", cut: false, wait: 0},
	{name: "cut_then_kill", cut: true, wait: 0, long: true},
	{name: "cut_then_kill_wait1", cut: true, wait: 1},
}

// TestFailover kills the primary mid-window under traffic, in each
// scenario, and checks per mode: every answer within storeTimeout +
// latencyMargin of time the process could run (stallProbe); store errors
// (on_store_error) for at most rediscoverWithin of it once the store is
// ready again (the sentinels promoted a replica; with WAIT, one is in
// sync), the mode's decisions after; no error but store errors;
// and admissions in the window ≤ limit (+ the uncoupled slack) + what the
// old primary can have lost: the units it acknowledged (allowed checks,
// granted lease credits) after the replicas' last sure copy (the cut; the
// start of the run when there is none). With WAIT, strict and cached_deny
// admit at most limit. Without WAIT, after a cut, strict admits more — by
// about the checks acknowledged after the cut — which is measured, not
// asserted: a check that times out on a loaded machine has still been
// counted, and that under-admission can hide the loss.
func TestFailover(t *testing.T) {
	var mu sync.Mutex
	var rows []string
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			runs := *failoverRuns
			if runs == 0 {
				if sc.long {
					t.Skip("measurement only: run with -failover-runs=N")
				}
				runs = 1
			}
			for run := range runs {
				t.Run(fmt.Sprint(run), func(t *testing.T) {
					r := runFailover(t, sc)
					mu.Lock()
					rows = append(rows, r...)
					mu.Unlock()
				})
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("\n| scenario | failovers | failover took | ready after | mode | store errors | recovered after | later errors | slowest answer | admitted | over limit | bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
	})
}

// runFailover runs sc once and returns its table rows.
func runFailover(t *testing.T, sc scenario) []string {
	env := testenv.StartSentinelReplicas(t, 2)
	log := newLedger()
	base := storetest.Timeline().Add(10 * time.Minute)
	probe := startStallProbe()
	defer probe.halt()
	t0 := time.Now()
	stamp := func() time.Time { return base.Add(time.Since(t0)) }

	set := &policy.Set{}
	d, err := policy.Parse("failover.yaml", []byte(policyYAML()))
	if err != nil {
		t.Fatal(err)
	}
	set.Domains = append(set.Domains, d)
	stop := make(chan struct{})
	var waits []func()
	for range nodes {
		e := newNode(t, env.URL(), sc.wait, log, set)
		for _, m := range modes {
			waits = append(waits, drive(e, m, callersPerRule, stamp, log, stop))
		}
	}
	halted := false
	halt := func() {
		if !halted {
			halted = true
			close(stop)
			for _, w := range waits {
				w()
			}
			probe.halt()
		}
	}
	defer halt() // before the engines close, should the test stop early

	waitProgress(t, log, probe, fmt.Sprintf("every rule admits %d", warmAdmissions), 0, func() bool {
		for _, m := range modes {
			if log.count(m, admitted, t0) < warmAdmissions {
				return false
			}
		}
		return true
	})
	// The slowest rule's admissions a second, warming up: how long the
	// waits below should take on this machine, as loaded as it is now.
	rate := float64(warmAdmissions) / time.Since(t0).Seconds()
	expect := func(answers int) time.Duration {
		return time.Duration(float64(answers) / rate * float64(time.Second))
	}
	sure := t0            // the replicas hold every write acknowledged before sure
	var cutDone time.Time // no replica gets a write made after it
	if sc.cut {
		sure = time.Now()
		env.CutReplication()
		cutDone = time.Now()
		// Each a check, or a store error after the store timeout and the
		// callers' pause (with WAIT every check fails: no replica gets it).
		failing := time.Duration((afterCut+nodes*callersPerRule-1)/(nodes*callersPerRule)) * (storeTimeout + errorPause)
		waitProgress(t, log, probe, fmt.Sprintf("%d strict answers after the cut", afterCut), 2*max(expect(afterCut), failing), func() bool {
			return log.count("strict", admitted, sure)+log.count("strict", storeFailed, sure) >= afterCut
		})
	}
	kill := time.Now()
	env.KillPrimary()
	killed := time.Now()
	env.WaitFailover(testenv.StoreDeadline)
	promoted := time.Now()
	// With WAIT a check is decided only once a replica of the new primary
	// acknowledges it: the store is ready again when one is in sync.
	ready := promoted
	if sc.wait > 0 {
		waitReplicas(t, env, sc.wait)
		ready = time.Now()
	}
	// The whole window at the rate measured warming up, and as long again
	// for the outage's answers and a machine loaded more than then.
	waitProgress(t, log, probe, "every rule denying again after the failover (window used up)", 2*expect(limit), func() bool {
		for _, m := range modes {
			if !log.exhausted(m, exhaustedRun, killed) {
				return false
			}
		}
		return true
	})
	halt()

	log.mu.Lock()
	otherErr := log.otherErr
	log.mu.Unlock()
	if otherErr != nil {
		t.Errorf("an answer failed with something other than a store error: %v", otherErr)
	}
	// One kill, one failover. On a starved machine a sentinel can judge a
	// live primary down and fail over again: what the intermediate primary
	// acknowledged is then lost too, and the bounds below widen to every
	// unit acknowledged since the replicas' last sure copy.
	failovers := env.Failovers()
	if failovers > 1 {
		t.Logf("%s: %d failovers for one kill (a sentinel judged a live primary down): bounds widened to everything acknowledged since the replicas' last sure copy", sc.name, failovers)
	}
	var rows []string
	for _, m := range modes {
		rows = append(rows, checkMode(t, sc, m, log, probe, t0, sure, kill, killed, promoted, ready, failovers))
		if sc.cut && sc.wait > 0 && failovers == 1 && (m == "strict" || m == "cached_deny") {
			if n := log.ackedStarted(m, cutDone, killed); n > 0 {
				t.Errorf("%s with WaitReplicas %d: the store acknowledged %d units to checks made after the replicas were cut off: a failover loses them", m, sc.wait, n)
			}
		}
	}
	return rows
}

// newNode returns an engine (one sidecar) on its own Sentinel-managed
// client, configured as cmd/sidecar configures one for --redis-url url and
// --store-timeout storeTimeout, counting acknowledged units in log.
func newNode(t *testing.T, url string, wait int, log *ledger, set *policy.Set) *engine.Engine {
	t.Helper()
	o, err := redis.ParseFailoverURL(url)
	if err != nil {
		t.Fatal(err)
	}
	o.MaxRetries, o.DialerRetries = -1, 1
	// As cmd/sidecar's: every call ends at its context's deadline (the
	// engine's store timeout), not the client's read timeout (500ms).
	o.ContextTimeoutEnabled = true
	o.DialTimeout = max(storeTimeout, 200*time.Millisecond)
	o.ReadTimeout = max(2*storeTimeout, 500*time.Millisecond)
	o.WriteTimeout = o.ReadTimeout
	c := redis.NewFailoverClient(o)
	t.Cleanup(func() { _ = c.Close() })
	rs, err := redisstore.New(c, redisstore.Options{
		Timeout:      max(4*storeTimeout, 200*time.Millisecond),
		WaitReplicas: wait,
		WaitTimeout:  storeTimeout / 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	e, err := engine.New(engine.Options{Store: countingStore{Store: rs, rules: modes, log: log}, StoreTimeout: storeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), set); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// checkMode checks mode's answers (see TestFailover) and returns its row.
func checkMode(t *testing.T, sc scenario, mode string, log *ledger, probe *stallProbe, t0, sure, kill, killed, promoted, ready time.Time, failovers int) string {
	t.Helper()
	log.mu.Lock()
	answers := log.answers[mode]
	log.mu.Unlock()
	// Each answer is judged on the time it took less the stalls the probe
	// saw meanwhile: the store timeout's timer, and the caller after it,
	// wait as long as the probe to run.
	var slowest, slowestRunning, stalled time.Duration
	for _, a := range answers {
		took := a.end.Sub(a.start)
		slowest = max(slowest, took)
		if s := probe.within(a.start, a.end); took-s > slowestRunning {
			slowestRunning, stalled = took-s, s
		}
	}
	// And a goroutine woken by the network waits its turn behind the
	// callers of other rules: twice (the deadline's timer, the caller
	// after it) the 99.9th percentile of goroutines' waits.
	queued := probe.queued(0.999)
	if slowestRunning > storeTimeout+latencyMargin+2*queued {
		t.Errorf("%s: an answer took %v while the process could run (%v in all, the probe saw it stalled %v), more than the store timeout %v + %v + twice %v (goroutines' wait to run, 99.9th percentile)",
			mode, slowestRunning, slowestRunning+stalled, stalled, storeTimeout, latencyMargin, queued)
	}
	errs, recovered, later := outage(answers, kill, promoted)
	// Store errors once the store is ready again are the client's to end.
	if last := rediscovered(answers, ready); last.After(ready) {
		running := last.Sub(ready) - probe.within(ready, last)
		if running > rediscoverWithin {
			t.Errorf("%s: store errors until %v after the store was ready again (%v after the kill; the sentinels promoted at %v, a replica in sync at %v), %v of it while the process could run, more than %v",
				mode, last.Sub(ready).Round(time.Millisecond), last.Sub(kill).Round(time.Millisecond), promoted.Sub(kill).Round(time.Millisecond),
				ready.Sub(kill).Round(time.Millisecond), running.Round(time.Millisecond), rediscoverWithin)
		}
	}
	admits := log.count(mode, admitted, t0)
	over := admits - limit
	// The most the old primary can have lost: what it acknowledged after
	// the replicas' last sure copy, by calls made before it died.
	lost := log.acked(mode, sure, killed)
	if failovers > 1 {
		lost = log.acked(mode, sure, time.Now())
	}
	bound := lost
	if mode == "leased_uncoupled" {
		bound += nodes * (batch - 1) // the uncoupled slack, failover or not
	}
	if int64(over) > bound {
		t.Errorf("%s: admitted %d in the window, %d over the limit %d; at most %d (units acknowledged since the replicas' last sure copy: %d)", mode, admits, over, limit, bound, lost)
	}
	if sc.wait > 0 && failovers == 1 && (mode == "strict" || mode == "cached_deny") && over > 0 {
		t.Errorf("%s with WaitReplicas %d: admitted %d, %d over the limit: a check acknowledged to a caller was lost in the failover", mode, sc.wait, admits, over)
	}
	return fmt.Sprintf("| %s | %d | %v | %v | %s | %d | %v | %s | %v (%v running; queued %v) | %d | %d | %d |", sc.name, failovers, promoted.Sub(kill).Round(10*time.Millisecond),
		ready.Sub(kill).Round(10*time.Millisecond), mode, errs, recovered.Round(10*time.Millisecond), later,
		slowest.Round(time.Millisecond), slowestRunning.Round(time.Millisecond), queued.Round(time.Millisecond), admits, over, bound)
}

// rediscovered returns the end of the last store error among the answers
// started from ready on, before the first of them the store decided: when
// the client had found the store again.
func rediscovered(answers []answer, ready time.Time) time.Time {
	after := slices.DeleteFunc(slices.Clone(answers), func(a answer) bool { return a.start.Before(ready) })
	slices.SortFunc(after, func(a, b answer) int { return a.start.Compare(b.start) })
	var last time.Time
	for _, a := range after {
		if a.outcome != storeFailed {
			break
		}
		if a.end.After(last) {
			last = a.end
		}
	}
	return last
}

// recoveredRun is how many answers in a row the store must decide (no
// store error) for the outage to count as over.
const recoveredRun = 50

// outage reads answers (in any order) from kill on: the store errors until,
// after promoted (the sentinels agree on a new primary), recoveredRun
// answers in a row were decided without one (errs: before promoted a
// leased mode may answer from its credits); the time from kill to the end
// of the last of them (recovered); and the store errors after that (later,
// by cause: timeouts of a loaded machine). It measures, for the table; on
// a loaded machine timeouts break the runs, and recovered stretches far
// past the rediscovery rediscovered times.
func outage(answers []answer, kill, promoted time.Time) (errs int, recovered time.Duration, later string) {
	after := slices.DeleteFunc(slices.Clone(answers), func(a answer) bool { return a.start.Before(kill) })
	slices.SortFunc(after, func(a, b answer) int { return a.start.Compare(b.start) })
	run := 0
	var causes [refused + 1]int
	for _, a := range after {
		switch {
		case a.outcome != storeFailed:
			if !a.start.Before(promoted) {
				run++
			}
		case run >= recoveredRun:
			causes[a.cause]++
		default:
			run = 0
			errs++
			recovered = max(recovered, a.end.Sub(kill))
		}
	}
	var parts []string
	for c, n := range causes {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %v", n, cause(c)))
		}
	}
	return errs, recovered, strings.Join(parts, ", ")
}

// waitProgress polls cond every 5ms until it holds. It fails t when no
// rule has had an answer decided (admitted or denied) for
// testenv.StoreDeadline: the store is gone, not slow. With budget > 0 —
// what the run measured the condition should take — it also fails once
// cond is still false after twice budget of time the process could run
// (the probe's stalls are not counted): past the first, it says so,
// naming the load it sees, and waits once more.
func waitProgress(t *testing.T, log *ledger, probe *stallProbe, what string, budget time.Duration, cond func() bool) {
	t.Helper()
	start := time.Now()
	allowed, extended := budget, false
	seen, progressed := log.decided(), start
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		now := time.Now()
		if n := log.decided(); n != seen {
			seen, progressed = n, now
		}
		if now.Sub(progressed) > testenv.StoreDeadline {
			t.Fatalf("not %s: no answer decided for %v (%d in all; longest stall of the process %v)", what, testenv.StoreDeadline, seen, probe.worst())
		}
		if budget > 0 && now.Sub(start)-probe.within(start, now) > allowed {
			if extended {
				var tails []string
				for _, m := range modes {
					tails = append(tails, log.tail(m, 40))
				}
				t.Fatalf("not within %v of running (twice the %v this run measured it should take), %v in all: %s; %d answers decided, longest stall of the process %v\n%s",
					allowed.Round(10*time.Millisecond), budget.Round(10*time.Millisecond), now.Sub(start).Round(10*time.Millisecond), what, seen, probe.worst(), strings.Join(tails, "\n"))
			}
			t.Logf("not within %v of running (the rate measured warming up) %s, %v in all; %d answers decided, longest stall of the process %v: waiting as long again",
				budget.Round(10*time.Millisecond), what, now.Sub(start).Round(10*time.Millisecond), seen, probe.worst())
			allowed, extended = 2*budget, true
		}
		<-tick.C
	}
}

// waitReplicas waits until the primary the sentinels agreed on has n
// replicas in sync (INFO replication: state=online).
func waitReplicas(t *testing.T, env *testenv.Sentinel, n int) {
	t.Helper()
	c := env.ServerClient(env.Primary())
	online := 0
	// The sentinels point the other replica at the new primary, and it
	// syncs in full (its link was cut): on a loaded machine that took
	// more than 10 s (beside a second make test). The wait is not what
	// the test judges: the outage is timed from when a replica is in sync.
	began := time.Now()
	if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.StoreDeadline)
		defer cancel()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return false
		}
		online = strings.Count(info, "state=online")
		return online >= n
	}) {
		t.Fatalf("the new primary %s has %d replicas in sync after %v, want %d (load %s)", env.Primary(), online, time.Since(began).Round(time.Millisecond), n, testenv.LoadAverage())
	}
	t.Logf("%d replicas in sync with the new primary after %v", online, time.Since(began).Round(time.Millisecond))
}
