package boundcheck

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// RLQSRows are the bounds table's rows for RLQS, as the RLQS checker
// judges them (JudgeRLQS). A window here is one of the counter in force:
// its algorithm and window length name it (RLQSPolicy.Counter), so a
// reload that changes only the figure or the name keeps it, and one that
// changes the window or the algorithm moves the buckets to another. What
// an Envoy was told at an instant counts in the window of the counter in
// force then, as the sidecar must lease it. Held and Slack, the engine
// checker's, are nil: an RLQS window is bounded by its limits alone.
var RLQSRows = map[string]Row{
	"assigned": {Name: "RLQS assigned",
		Most: "Σ max_tokens of the token buckets Envoys are assigned in a window ≤ the largest limit in force on its counter during the window " +
			"(a reload bounds the windows after it: a window that starts after a cut, or a cut to 0, is bounded by the new limit alone; " +
			"one a reload lands in, by the larger of the two)",
		Least: "a steady window (no reload, reset or restart; a fixed window of 10 s or more) from the second on assigns at least min(L, E) in all, " +
			"E the Envoys subscribed before it whose demand is not known to be 0 (no report with time elapsed yet, or one with a request) when it leases " +
			"(at its start; with several sidecars, after the demand ledger's wait for the others, 500 ms at most): " +
			"each is predicted at least one unit, and the sidecars' max-min shares of L add up to L"},
	"admitted": {Name: "RLQS admitted",
		Most: "requests the Envoys' filters admit in a window ≤ what they were assigned in it (every assignment expires before its window ends), " +
			"plus, where a reload moved the counter, what they were assigned in the windows of the other counters the window overlaps " +
			"(a token bucket of the old counter lives until its TTL); " +
			"under ALLOW_ALL (Envoy's default no_assignment_behavior; no resets or restarts), besides each bucket's first request at each Envoy " +
			"(one per Envoy, and one more after each abandon): the sidecar keeps a DENY_ALL in force wherever no assignment is",
		Least: "— (judged on what is assigned)"},
}

// RLQSViolation is a window of one bucket that broke its row.
type RLQSViolation struct {
	Violation
	Bucket   int
	From, To time.Duration // the window, since the schedule's start
}

// rlqsVersion is a policy in force from From to To (both included: at a
// reload's instant, what came before it was still under the old policy).
type rlqsVersion struct {
	RLQSPolicy
	From, To time.Duration
}

func rlqsVersions(sc RLQSSchedule) []rlqsVersion {
	out := []rlqsVersion{{RLQSPolicy: sc.Policy}}
	for _, st := range sc.Steps {
		if st.Kind == RLQSReload {
			out[len(out)-1].To = st.At
			out = append(out, rlqsVersion{RLQSPolicy: st.Policy, From: st.At})
		}
	}
	out[len(out)-1].To = max(sc.Length, out[len(out)-1].From)
	return out
}

// rlqsWindow is one window of one bucket's counter.
type rlqsWindow struct {
	bucket  int
	counter string
	length  time.Duration
	k       int64 // the window is [k·length, (k+1)·length)
}

func (w rlqsWindow) from() time.Duration { return time.Duration(w.k) * w.length }
func (w rlqsWindow) to() time.Duration   { return w.from() + w.length }

func windowOf(bucket int, p RLQSPolicy, at time.Duration) rlqsWindow {
	return rlqsWindow{bucket: bucket, counter: p.Counter(), length: p.Window, k: int64(at / p.Window)}
}

// JudgeRLQS judges every window of every bucket of sc by RLQSRows, from
// what the Envoys were told.
func JudgeRLQS(sc RLQSSchedule, told RLQSTold) []RLQSViolation {
	vers := rlqsVersions(sc)
	assigned := map[rlqsWindow]int64{}
	perEnvoy := map[rlqsWindow][]int64{}
	admitted := map[rlqsWindow]int64{}
	first := map[rlqsWindow]int64{} // admitted by creating their bucket
	for _, a := range told.Actions {
		if a.Other != "" {
			continue
		}
		w := windowOf(a.Bucket, vers[a.Version].RLQSPolicy, a.At)
		assigned[w] += a.Tokens
		if perEnvoy[w] == nil {
			perEnvoy[w] = make([]int64, len(sc.Envoys))
		}
		perEnvoy[w][a.Envoy] += a.Tokens
	}
	for i, st := range sc.Steps {
		if st.Kind == RLQSRequest && told.Steps[i].Admitted {
			w := windowOf(st.Bucket, vers[told.Steps[i].Version].RLQSPolicy, st.At)
			admitted[w]++
			if told.Steps[i].Created {
				first[w]++
			}
		}
	}
	var out []RLQSViolation
	add := func(row string, w rlqsWindow, safety bool, format string, args ...any) {
		out = append(out, RLQSViolation{Violation: Violation{Row: RLQSRows[row].Name, Window: int(w.k), Safety: safety,
			Detail: fmt.Sprintf("bucket b%d, counter %s, window [%v, %v): ", w.bucket, w.counter, w.from(), w.to()) + fmt.Sprintf(format, args...)},
			Bucket: w.bucket, From: w.from(), To: w.to()})
	}
	for _, w := range sortedWindows(assigned, admitted) {
		bound, in := int64(0), []string(nil)
		for _, v := range vers {
			if v.Counter() == w.counter && v.From < w.to() && v.To >= w.from() {
				bound = max(bound, v.Limit)
				in = append(in, v.RLQSPolicy.String())
			}
		}
		if got := assigned[w]; got > bound {
			add("assigned", w, true, "assigned %d (per Envoy %v), want at most %d: %s; policies in force: %v",
				got, perEnvoy[w], bound, RLQSRows["assigned"].Most, in)
		}
		carried := int64(0)
		for o, n := range assigned {
			if o.bucket == w.bucket && o.counter != w.counter && o.from() < w.to() && o.to() > w.from() {
				carried += n
			}
		}
		if got := admitted[w]; got > assigned[w]+carried+first[w] {
			add("admitted", w, true, "admitted %d, want at most %d assigned in it + %d assigned in the other counters' windows it overlaps + %d first requests: %s",
				got, assigned[w], carried, first[w], RLQSRows["admitted"].Most)
		}
	}
	if sc.Steady {
		out = append(out, judgeSteady(sc, told, assigned)...)
	}
	return out
}

func sortedWindows(ms ...map[rlqsWindow]int64) []rlqsWindow {
	seen := map[rlqsWindow]bool{}
	var out []rlqsWindow
	for _, m := range ms {
		for w := range m {
			if !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	slices.SortFunc(out, func(a, b rlqsWindow) int {
		return cmp.Or(cmp.Compare(a.from(), b.from()), cmp.Compare(a.bucket, b.bucket), cmp.Compare(a.counter, b.counter))
	})
	return out
}

// judgeSteady judges the least a steady schedule's windows assign: from
// window 1 on, every window that ends by the schedule's end assigns at
// least min(L, E) per bucket (RLQSRows["assigned"].Least).
func judgeSteady(sc RLQSSchedule, told RLQSTold, assigned map[rlqsWindow]int64) []RLQSViolation {
	p := sc.Policy
	var out []RLQSViolation
	buckets := map[int]bool{}
	for _, st := range sc.Steps {
		if st.Kind == RLQSRequest {
			buckets[st.Bucket] = true
		}
	}
	for b := range buckets {
		for k := int64(1); time.Duration(k+1)*p.Window <= sc.Length; k++ {
			w := rlqsWindow{bucket: b, counter: p.Counter(), length: p.Window, k: k}
			// A report heard before the window's lease counts: at its
			// start, or, with several sidecars, up to the demand
			// ledger's early part of it, which the first to announce may
			// wait out for the others (pkg/rlqsserver).
			heard := w.from() + time.Microsecond
			if sc.Servers > 1 {
				heard = w.from() + gale.LedgerEarly(p.Window) + time.Millisecond
			}
			var e int64
			for env := range sc.Envoys {
				if demandNotZero(sc, told, env, b, w.from(), heard) {
					e++
				}
			}
			if least := min(p.Limit, e); assigned[w] < least {
				out = append(out, RLQSViolation{Violation: Violation{Row: RLQSRows["assigned"].Name, Window: int(k),
					Detail: fmt.Sprintf("bucket b%d, window [%v, %v): assigned %d, want at least %d = min(L %d, E %d): %s",
						b, w.from(), w.to(), assigned[w], least, p.Limit, e, RLQSRows["assigned"].Least)},
					Bucket: b, From: w.from(), To: w.to()})
			}
		}
	}
	slices.SortFunc(out, func(a, b RLQSViolation) int { return cmp.Compare(a.From, b.From) })
	return out
}

// demandNotZero reports whether Envoy env subscribed bucket b before at
// and its sidecar cannot know its demand to be 0 when the window starting
// at at leases: no report of the bucket with whole seconds elapsed, or
// one with a request (the smoothed rate never falls back to 0). A report
// ticks before the requests of its instant; the first request is
// reported at once, on its own. Reports up to heard count: a microsecond
// after at with one sidecar (the window's timer fires that late at most:
// the sidecar maps the store's window end, in whole microseconds, onto
// its own clock from the instant it asked), so a report at the boundary
// reaches it first; one that reaches it later can only start a lease of
// its own. With several, the lease may wait for the others' announcements
// in the demand ledger, and reports up to the end of that wait count.
func demandNotZero(sc RLQSSchedule, told RLQSTold, env, b int, at, heard time.Duration) bool {
	var reqs []time.Duration
	for _, st := range sc.Steps {
		if st.Kind == RLQSRequest && st.Envoy == env && st.Bucket == b {
			reqs = append(reqs, st.At)
		}
	}
	if len(reqs) == 0 || reqs[0] >= at {
		return false
	}
	created, last, i := reqs[0], reqs[0], 1
	known, positive := false, false
	for _, tick := range told.Ticks[env] {
		if tick <= created {
			continue
		}
		if tick > heard {
			break
		}
		n := 0
		for ; i < len(reqs) && reqs[i] < tick; i++ {
			n++
		}
		if tick-last >= time.Second {
			known = true
			positive = positive || n > 0
		}
		last = tick
	}
	return !known || positive
}
