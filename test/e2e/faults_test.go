package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

var faultsTable = flag.String("faults-table", "", "write TestE2EFaults' results as a markdown table to this file")

// The fault suite's rules: every mode under every on_store_error policy
// (federated mode under each outage mode instead: it has no
// on_store_error), each limiting its own key to faultLimit per hour (one
// window for the whole test), leased and federated ones in batches of
// faultBatch; regional_only's regional budget is faultRegional.
const (
	faultLimit    = 40
	faultBatch    = 5
	faultRegional = 10
	// fedTimeout is the federated rules' --federation-timeout. A federated
	// lease may take three round trips (escrow, coordinator, refill), and a
	// leased check that waits for another's lease and then leases itself
	// can wait two of its timeouts: the store timeout keeps that within the
	// answer bound.
	fedTimeout = storeTimeout
)

var (
	faultModes    = []string{"strict", "cached_deny", "leased", "leased_uncoupled", "fair", "federated"}
	faultPolicies = []string{"allow", "deny", "error"}
	// fedPolicies are federated mode's outage modes, in the place of
	// on_store_error.
	fedPolicies = []string{"fail_closed", "regional_only"}
)

// policiesOf are the policies a mode's rules are run under.
func policiesOf(mode string) []string {
	if mode == "federated" {
		return fedPolicies
	}
	return faultPolicies
}

// faultPolicy is the domain "faults": a rule per mode × policy, on
// descriptor key MODE_POLICY.
func faultPolicy() string {
	var b strings.Builder
	b.WriteString("domain: faults\ndescriptors:\n")
	for _, m := range faultModes {
		for _, p := range policiesOf(m) {
			fmt.Fprintf(&b, "  - key: %s_%s\n    rate_limit: {name: %s_%s, unit: hour, requests_per_unit: %d}\n", m, p, m, p, faultLimit)
			if m != "federated" {
				fmt.Fprintf(&b, "    on_store_error: %s\n", p)
			}
			switch m {
			case "cached_deny":
				b.WriteString("    mode: cached_deny\n")
			case "leased":
				fmt.Fprintf(&b, "    mode: leased\n    lease: {batch: %d}\n", faultBatch)
			case "leased_uncoupled":
				fmt.Fprintf(&b, "    mode: leased\n    lease: {batch: %d, window_coupled: false}\n", faultBatch)
			case "fair":
				fmt.Fprintf(&b, "    fairness: {tenant_key: %s_%s}\n", m, p)
			case "federated":
				fmt.Fprintf(&b, "    mode: federated\n    federation: {batch: %d, outage: %s", faultBatch, p)
				if p == "regional_only" {
					fmt.Fprintf(&b, ", regional_limit: %d", faultRegional)
				}
				b.WriteString("}\n")
			}
		}
	}
	return b.String()
}

// bound is the most a rule may admit in one window on one node while its
// store fails and recovers: the limit; for uncoupled leases the node's
// carried batch on top (docs/PROOFS.md §1, N = 1); for a federated rule
// under regional_only the region's regional budget on top (README,
// Federation: granted + Σ regional_limit, K = 1). A rule whose policy is
// allow admits without limit while the store fails, by design.
func bound(mode, policy string) int {
	switch {
	case mode == "leased_uncoupled":
		return faultLimit + faultBatch - 1
	case mode == "federated" && policy == "regional_only":
		return faultLimit + faultRegional
	}
	return faultLimit
}

// fault is one toxic between the sidecar and Redis.
type fault struct {
	name, kind, stream, attributes string
	// fallsBack says the fault makes store calls fail: false when they
	// should all succeed (latency well under the store timeout), which a
	// starved CPU can still break now and then.
	fallsBack bool
}

var faults = []fault{
	{"latency 10ms (below --store-timeout)", "latency", "downstream", `{"latency": 10}`, false},
	{"latency 50ms (at --store-timeout)", "latency", "downstream", `{"latency": 50}`, true},
	{"latency 1s (20× --store-timeout)", "latency", "downstream", `{"latency": 1000}`, true},
	{"jitter 20ms ± 40ms", "latency", "downstream", `{"latency": 20, "jitter": 40}`, true},
	{"connection resets", "reset_peer", "upstream", `{"timeout": 0}`, true},
	{"blackhole (partition that hangs)", "timeout", "upstream", `{"timeout": 0}`, true},
	{"slow close (2s)", "slow_close", "downstream", `{"delay": 2000}`, true},
	{"bandwidth 1 KB/s", "bandwidth", "downstream", `{"rate": 1}`, true},
}

// answers are one rule's answers during one fault.
type answers struct {
	ok, over, unavailable, other int
	otherErr                     error
	lat                          []time.Duration
}

func (a *answers) add(resp *rlsv3.RateLimitResponse, err error, took time.Duration) {
	a.lat = append(a.lat, took)
	switch {
	case err == nil && resp.GetOverallCode() == ok:
		a.ok++
	case err == nil && resp.GetOverallCode() == over:
		a.over++
	case status.Code(err) == codes.Unavailable:
		a.unavailable++
	default:
		a.other++
		a.otherErr = fmt.Errorf("%v %v", resp, err)
	}
}

// TestE2EFaults puts toxiproxy between a redis-backed sidecar and Redis and
// applies each fault mid-traffic, for every mode under every
// on_store_error policy: every answer within the store timeout (plus the
// harness's margin), every answer one its policy allows, nothing admitted
// beyond the mode's bound (counted after healing, by taking what the real
// Redis still grants), goroutines back to their baseline and Redis deciding
// again within a second of healing.
func TestE2EFaults(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, r.Addr)
	// The region's escrow (--redis-url) and the federation's coordinator
	// share the server behind the proxy (their keys apart by prefix): a
	// fault cuts a federated rule off from both. A federated lease may take
	// three round trips (escrow, coordinator, refill): its timeout is three
	// store timeouts, and answers stay within answerBound.
	behind := "redis://" + proxy.Addr + "/0"
	s := startSidecar(t, options{store: "redis", redisURL: behind,
		args:  []string{"--region", "faults", "--federation-url", behind, "--federation-timeout", fedTimeout.String()},
		files: map[string]string{"faults.yaml": faultPolicy()}})

	// A call's deadline is the harness's outer bound, not a judgement:
	// answer times are judged against the bands below, which a deadline
	// cut short would preempt on a loaded machine.
	call := func(rule, value string) (*rlsv3.RateLimitResponse, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), sampleDeadline)
		defer cancel()
		start := time.Now()
		resp, err := s.rls.ShouldRateLimit(ctx, request("faults", desc(rule, value)))
		return resp, err, time.Since(start)
	}
	var rules []string
	modeOf, policyOf := map[string]string{}, map[string]string{}
	for _, m := range faultModes {
		for _, p := range policiesOf(m) {
			rule := m + "_" + p
			rules = append(rules, rule)
			modeOf[rule], policyOf[rule] = m, p
		}
	}
	// Warm up every rule (scripts cached, leases taken), then the baseline.
	// Not judged: a store call that misses the 50 ms store timeout on a
	// loaded machine (fair_error's lease did, beside a second make test)
	// is asked again, within the harness's outer bound.
	for _, rule := range rules {
		deadline := time.Now().Add(sampleDeadline)
		for {
			_, err, _ := call(rule, "warm-up")
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "store failed") || time.Now().After(deadline) {
				t.Fatalf("%s: %v", rule, err)
			}
		}
	}
	// The scrapes are not measured: a loaded machine answered GET
	// /metrics in more than the harness's 5 s (load average 43), and
	// only a sidecar that answers nothing should stop the test.
	s.http.Timeout = sampleDeadline
	goroutines := func() float64 { return s.metrics(t).get("go_goroutines") }
	storeErrors := func() float64 { return s.metrics(t).get("throttlekit_store_errors_total") }
	base := goroutines()

	var rows []string
	for fi, f := range faults {
		// Each fault is judged on values of its own; a run whose answer
		// times the load spoiled (see slowAnswers) is run again on new ones.
		var spoiled []string
		for attempt := 1; ; attempt++ {
			value := fmt.Sprintf("fault-%d-%d", fi, attempt)
			got := map[string]*answers{}
			for _, rule := range rules {
				got[rule] = &answers{}
			}
			var mu sync.Mutex
			var stop atomic.Bool
			var wg sync.WaitGroup
			// The answers count from here, the healthy traffic before the
			// fault included: so do the store errors an UNAVAILABLE answer
			// needs (a call over the timeout on a loaded machine, before the
			// fault, is one).
			errsTraffic := storeErrors()
			// The rules count per hour: a run (its traffic and its drain)
			// that an hour's end cut in two counted in two windows, and a
			// loaded machine makes the run long enough to meet one.
			window := windowEnd(time.Now(), time.Hour)
			meter := testenv.MeasureLateness()
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; !stop.Load(); i++ {
						rule := rules[i%len(rules)]
						resp, err, took := call(rule, value)
						mu.Lock()
						got[rule].add(resp, err, took)
						mu.Unlock()
					}
				}()
			}
			// Traffic first, then the fault mid-traffic, then healed.
			waitFor(t, sampleDeadline, "healthy traffic before "+f.name, func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				n := len(got[rules[0]].lat)
				return n >= 5, fmt.Sprintf("%d answers", n)
			})
			// The machine's own share of slow store calls, measured on this
			// traffic before the fault: a call over 25 ms without the fault may
			// cross the store timeout with it. A loaded machine (CI) has more.
			m0 := s.metrics(t)
			waitFor(t, sampleDeadline, "a healthy sample before "+f.name, func() (bool, string) {
				mu.Lock()
				defer mu.Unlock()
				n := len(got[rules[0]].lat)
				return n >= 20, fmt.Sprintf("%d answers", n)
			})
			m1 := s.metrics(t)
			slowShare := slowStoreShare(m0, m1, 0.025)
			t.Logf("%s: %.1f%% of store calls over 25 ms before the fault", f.name, 100*slowShare)
			// The slowest healthy answer before the fault: what the load adds
			// to an answer beside its store call, measured on this run.
			var healthySlowest time.Duration
			mu.Lock()
			for _, rule := range rules {
				for _, took := range got[rule].lat {
					healthySlowest = max(healthySlowest, took)
				}
			}
			mu.Unlock()
			errsBefore := storeErrors()
			proxy.Toxic(f.kind, f.stream, f.attributes)
			faultEnds := time.Now().Add(1500 * time.Millisecond)
			waitFor(t, 5*time.Second, "the fault's span", func() (bool, string) { return !time.Now().Before(faultEnds), "" })
			stop.Store(true)
			wg.Wait()
			// How late this process's timers fired while the traffic ran: the
			// sidecar's store timeout fires late by about as much, and the
			// test reads each answer late by as much again.
			late := meter.End()
			errsAfter := storeErrors()
			failed := errsAfter - errsBefore // store calls on_store_error answered under the fault
			failedAll := errsAfter - errsTraffic
			proxy.Heal()
			meter = testenv.MeasureLateness()
			recovery := waitFor(t, sampleDeadline, "Redis deciding again after healing "+f.name, func() (bool, string) {
				resp, err, _ := call("strict_deny", fmt.Sprintf("recovery-%d-%d", fi, time.Now().UnixNano()))
				return err == nil && resp.GetOverallCode() == ok, fmt.Sprintf("%v %v", resp, err)
			})
			recoveryLate := meter.End()
			// Answer times are judged in wall time: their bands widen by
			// what this run measured the load to add, and a run that
			// still misses one is said so and made again (see below).
			var slowAnswers []string
			if recovery > time.Second+2*recoveryLate {
				slowAnswers = append(slowAnswers, fmt.Sprintf("%s: Redis decided again %v after healing, want < 1s plus twice the %v this process's timers fired late", f.name, recovery, recoveryLate))
			}
			slack := max(2*late, healthySlowest)

			var all, fed []time.Duration // answers of the store-timeout rules, and of the federated ones
			for _, rule := range rules {
				if modeOf[rule] == "federated" {
					fed = append(fed, got[rule].lat...)
					continue
				}
				all = append(all, got[rule].lat...)
			}
			// ≤ 1% of the calls, or twice the share the machine made slow
			// before the fault, whichever is more. The load can rise
			// between the sample and the fault (53 of 591 failed under a
			// 10 ms fault at load 10 beside a second make test, against
			// 2.2% slow before): like a slow answer, it is judged again on
			// new values, and fails only in every run.
			if allowed := max(0.01, 2*slowShare) * float64(len(all)+len(fed)); !f.fallsBack && failed > allowed {
				slowAnswers = append(slowAnswers, fmt.Sprintf("%s: %v of %d store calls failed, want ≤ %.0f (1%%, or twice the %.1f%% of calls over 25 ms before the fault; timers up to %v late): the fault should stay under the store timeout",
					f.name, failed, len(all)+len(fed), allowed, 100*slowShare, late))
			}
			var overBound []string         // count bounds broken; judged below unless a window ended
			overAdmitted, stranded := 0, 0 // the most over a bound; the most credits a leased rule left unusable
			for _, rule := range rules {
				a := got[rule]
				mode, policy := modeOf[rule], policyOf[rule]
				if a.other > 0 {
					t.Errorf("%s, %s: %d answers no policy gives, e.g. %v", f.name, rule, a.other, a.otherErr)
				}
				if a.unavailable > 0 && (policy != "error" || failedAll == 0) {
					t.Errorf("%s, %s: %d UNAVAILABLE answers, want none (on_store_error %s, %v store calls failed while it ran)", f.name, rule, a.unavailable, policy, failedAll)
				}
				within, timeout := answerBound, storeTimeout
				if mode == "federated" {
					within, timeout = answerBound-storeTimeout+fedTimeout, fedTimeout
				}
				if slow := slices.Max(a.lat); slow > within+slack {
					slowAnswers = append(slowAnswers, fmt.Sprintf("%s, %s: slowest answer %v, want ≤ %v (its timeout %v) plus %v, the more of twice the %v this process's timers fired late and the slowest healthy answer %v",
						f.name, rule, slow, within, timeout, slack, late, healthySlowest))
				}
				if policy == "allow" && failedAll > 0 {
					// Its fallback admits by design, under the fault or in a
					// healthy call a loaded machine made slower than the
					// timeout.
					continue
				}
				more := drain(t, s, f.name, rule, value, policy, bound(mode, policy)+2*faultBatch)
				total := a.ok + more
				overAdmitted = max(overAdmitted, total-bound(mode, policy))
				if total > bound(mode, policy) {
					overBound = append(overBound, fmt.Sprintf("%s, %s: admitted %d during the fault and %d after healing: %d > the mode's bound %d",
						f.name, rule, a.ok, more, total, bound(mode, policy)))
				}
				if strings.HasPrefix(mode, "leased") || mode == "federated" {
					stranded = max(stranded, faultLimit-total)
				}
			}
			slices.Sort(all)
			p99, worst := all[len(all)*99/100], all[len(all)-1]
			fedWorst := slices.Max(fed)
			var answered []string
			for _, p := range append(slices.Clone(faultPolicies), fedPolicies...) {
				var o, d, u int
				for _, m := range faultModes {
					if a := got[m+"_"+p]; a != nil {
						o, d, u = o+a.ok, d+a.over, u+a.unavailable
					}
				}
				answered = append(answered, fmt.Sprintf("%s: %d OK, %d over, %d unavailable", p, o, d, u))
			}
			if !testenv.Eventually(func() bool { return goroutines() <= base+2 }) {
				t.Errorf("%s: %v goroutines 10s after healing, baseline %v", f.name, goroutines(), base)
			}
			row := fmt.Sprintf("| %s | %d | %v | %v | %v | %v | %s | %d | %d | %v |", f.name, len(all)+len(fed), failed,
				p99.Round(100*time.Microsecond), worst.Round(100*time.Microsecond), fedWorst.Round(100*time.Microsecond), strings.Join(answered, "; "),
				max(0, overAdmitted), max(0, stranded), recovery.Round(time.Millisecond))
			// An hour ends once in a run at most, so this ends.
			if windowEnd(time.Now(), time.Hour) != window {
				t.Logf("%s, run %d: an hour's window ended during the run, so its counts are in two windows and not judged (%d over a bound); again on new values", f.name, attempt, len(overBound))
				continue
			}
			for _, over := range overBound {
				t.Error(over)
			}
			if len(slowAnswers) == 0 {
				rows = append(rows, row)
				break
			}
			spoiled = append(spoiled, fmt.Sprintf("run %d: %d judgements the load may have spoiled (slow answers, store calls failed) under load average %s", attempt, len(slowAnswers), testenv.LoadAverage()))
			if attempt >= judgeAttempts {
				for _, slow := range slowAnswers {
					t.Error(slow)
				}
				t.Errorf("%s: answers too slow or store calls failed in each of %d runs: %s", f.name, attempt, strings.Join(spoiled, "; "))
				rows = append(rows, row)
				break
			}
			t.Logf("%s, run %d: answers too slow or store calls failed, the load not ruled out (load average %s; timers up to %v late; slowest healthy answer %v), e.g. %s; again on new values",
				f.name, attempt, testenv.LoadAverage(), late, healthySlowest, slowAnswers[0])
		}
	}
	table := "| fault | answers | store calls failed | p99 | max | federated max | answered (by on_store_error, and federated outage mode) | over-admitted | leased credits stranded | recovery |\n" +
		"| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n" +
		strings.Join(rows, "\n") + "\n"
	t.Logf("store timeout %v; no rule admitted past its mode's bound:\n%s", storeTimeout, table)
	if *faultsTable != "" {
		if err := os.WriteFile(*faultsTable, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// drain takes what Redis still grants rule's value in the window after
// healing, at most limit, until Redis denies. These are store calls the
// test does not measure, under the 50 ms store timeout it does: on a
// loaded machine on_store_error may answer some of them, which the rule's
// throttlekit_store_fallbacks_total counts. An OK that was allow's
// fallback is not Redis's grant and is taken off; a pass that deny's
// fallback (OVER_LIMIT) or error's (UNAVAILABLE) ended is followed by
// another, which goes on from there. A loaded machine misses 50 ms often
// (it ended a pass in one call of ten in make test), so the drain fails
// only when more passes than limit, one store failure each, end without
// Redis's denial: a store that fails more often than it answers, which
// the message names with the load it saw.
func drain(t *testing.T, s *sidecar, faultName, rule, value, policy string, limit int) int {
	t.Helper()
	fallbacks := func() float64 {
		return s.metrics(t).get("throttlekit_store_fallbacks_total", "domain", "faults", "rule", rule)
	}
	var spoiled []string
	more := 0
	for pass := 1; pass <= limit; pass++ {
		before := fallbacks()
		oks, denied, unavailable := 0, false, false
		for range limit {
			ctx, cancel := context.WithTimeout(context.Background(), sampleDeadline)
			resp, err := s.rls.ShouldRateLimit(ctx, request("faults", desc(rule, value)))
			cancel()
			if policy == "error" && status.Code(err) == codes.Unavailable {
				unavailable = true
				break
			}
			if err != nil {
				t.Fatalf("%s, %s: draining after healing: %v", faultName, rule, err)
			}
			if resp.GetOverallCode() != ok {
				denied = true
				break
			}
			oks++
		}
		fell := int(fallbacks() - before)
		if policy == "allow" {
			oks -= fell // allow's fallbacks are OK answers, and only they are
		}
		more += oks
		// A pass ends on Redis's denial unless deny's fallback (its only
		// OVER_LIMIT, the last answer of the pass) or error's UNAVAILABLE
		// ended it; or, with no fallback in it, at the limit.
		switch {
		case denied && (policy != "deny" || fell == 0), !denied && !unavailable && fell == 0:
			if len(spoiled) > 0 {
				t.Logf("%s, %s: draining after healing, %d passes ended by the store failing, drained on: %s", faultName, rule, len(spoiled), strings.Join(spoiled, "; "))
			}
			return more
		}
		spoiled = append(spoiled, fmt.Sprintf("%d fallbacks, UNAVAILABLE %v (load average %s)", fell, unavailable, testenv.LoadAverage()))
	}
	t.Fatalf("%s, %s: draining after healing, the store failed in each of %d passes: %s", faultName, rule, limit, strings.Join(spoiled, "; "))
	return 0
}

// slowStoreShare is the share of the store calls made between scrapes m0
// and m1 that took longer than le seconds (a bucket bound of
// throttlekit_store_call_duration_seconds, as Prometheus writes it).
func slowStoreShare(m0, m1 metricSet, le float64) float64 {
	const h = "throttlekit_store_call_duration_seconds"
	bound := strconv.FormatFloat(le, 'g', -1, 64)
	calls := m1.get(h+"_count") - m0.get(h+"_count")
	fast := m1.get(h+"_bucket", "le", bound) - m0.get(h+"_bucket", "le", bound)
	if calls <= 0 {
		return 0
	}
	return (calls - fast) / calls
}
