// Package boundcheck is a seeded, randomized fleet checker: it composes the
// engine's features (modes, algorithms, several limits on one descriptor,
// fair rules with many tenants, costs with reservations a hostile client
// picks, reloads that re-figure, rename, move or re-count a limit, nodes
// killed or stopped, the store restarted empty, skewed clocks) on several
// engines sharing one store, plays a schedule drawn from a seed on a fake
// timeline, and judges every counter from what the clients were told
// against its row of the bounds table (Rows). A failing schedule shrinks to
// a short one that still fails, printed so it can become a regression test.
//
// Every source of nondeterminism is the seed: the policy, the steps, the
// instants, the faults. The engines decide on the instants the schedule
// gives them (Decide's now, and each engine's fake clock), so a run on the
// memory store replays exactly.
package boundcheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Window is the length of a schedule's window: its steps are drawn window
// by window, and the first limit of a steady schedule counts per Window.
const Window = 10 * time.Second

// Mode is a rule's mode as policy YAML names it.
type Mode string

const (
	Strict     Mode = "strict"
	CachedDeny Mode = "cached_deny"
	Leased     Mode = "leased"
)

// The algorithms a schedule draws (policy YAML's names).
const (
	FixedWindow   = policy.FixedWindow
	SlidingWindow = policy.SlidingWindow
	GCRA          = policy.GCRA
	TokenBucket   = policy.TokenBucket
)

// Limit is one rate limit of the descriptor: Count units per Period.
type Limit struct {
	Name      string // a label: not part of the counter ("" for none)
	Algorithm policy.Algorithm
	Period    time.Duration // whole seconds
	Count     int64         // requests_per_unit
	Burst     int64         // gcra, token_bucket: the bucket's size (0: Count)
}

// Counter is what the engine counts a limit's units by, besides the
// descriptor's value: its period and algorithm. A limit's name and figures
// are not part of it, so a reload that renames or re-figures a limit keeps
// its count, and one that changes its period or algorithm starts another.
type Counter struct {
	Algorithm policy.Algorithm
	Period    time.Duration
}

// Counter is the counter l counts in.
func (l Limit) Counter() Counter { return Counter{l.Algorithm, l.Period} }

// Capacity is the most units the limit admits at once: its burst for a
// bucket, its count for a window.
func (l Limit) Capacity() int64 {
	if l.Burst > 0 && l.bucket() {
		return l.Burst
	}
	return l.Count
}

func (l Limit) bucket() bool { return l.Algorithm == GCRA || l.Algorithm == TokenBucket }

// PerWindow is about what the limit admits in a Window: its count scaled
// to the Window, and a bucket's burst.
func (l Limit) PerWindow() int64 {
	n := l.Count * int64(Window) / int64(l.Period)
	if l.bucket() {
		n += l.Capacity()
	}
	return max(1, n)
}

func (l Limit) String() string {
	s := fmt.Sprintf("%s %d/%v", l.Algorithm, l.Count, l.Period)
	if l.bucket() && l.Burst > 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	if l.Name != "" {
		s = l.Name + ": " + s
	}
	return s
}

// Spec is a policy: one descriptor `tenant` with its limits (a fair rule
// has one fixed window), and how they are enforced.
type Spec struct {
	Limits     []Limit
	Mode       Mode
	Batch      int64 // leased: the lease batch
	Fair       bool  // fairness: {tenant_key: tenant}; no mode
	MaxTenants int   // fair: max_tenants (0: the default)
}

// Bucketless reports whether every limit of s counts in windows.
func (s Spec) Bucketless() bool {
	for _, l := range s.Limits {
		if l.bucket() {
			return false
		}
	}
	return true
}

// YAML is the spec's policy file.
func (s Spec) YAML() string {
	var b strings.Builder
	b.WriteString("domain: bc\ndescriptors:\n  - key: tenant\n")
	if s.Fair { // a fair limit leases its budget itself: no mode
		fmt.Fprintf(&b, "    fairness: {tenant_key: tenant")
		if s.MaxTenants > 0 {
			fmt.Fprintf(&b, ", max_tenants: %d", s.MaxTenants)
		}
		b.WriteString("}\n")
	} else {
		fmt.Fprintf(&b, "    mode: %s\n", s.Mode)
		if s.Mode == Leased {
			fmt.Fprintf(&b, "    lease: {batch: %d}\n", s.Batch)
		}
	}
	limit := func(l Limit) string {
		var f []string
		if l.Name != "" {
			f = append(f, "name: "+l.Name)
		}
		f = append(f, fmt.Sprintf("unit: second, unit_multiplier: %d, requests_per_unit: %d", int(l.Period/time.Second), l.Count))
		if l.Algorithm != FixedWindow {
			f = append(f, "algorithm: "+string(l.Algorithm))
		}
		if l.bucket() && l.Burst > 0 {
			f = append(f, fmt.Sprintf("burst: %d", l.Burst))
		}
		return "{" + strings.Join(f, ", ") + "}"
	}
	if len(s.Limits) == 1 {
		fmt.Fprintf(&b, "    rate_limit: %s\n", limit(s.Limits[0]))
		return b.String()
	}
	b.WriteString("    rate_limits:\n")
	for _, l := range s.Limits {
		fmt.Fprintf(&b, "      - %s\n", limit(l))
	}
	return b.String()
}

func (s Spec) String() string {
	var b strings.Builder
	if s.Fair {
		b.WriteString("fair")
		if s.MaxTenants > 0 {
			fmt.Fprintf(&b, " (max_tenants %d)", s.MaxTenants)
		}
	} else {
		b.WriteString(string(s.Mode))
		if s.Mode == Leased {
			fmt.Fprintf(&b, " (batch %d)", s.Batch)
		}
	}
	for i, l := range s.Limits {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		b.WriteString(sep + l.String())
	}
	return b.String()
}

// Kind is what a step does.
type Kind uint8

const (
	// Check asks Cost units for Tenant on Node, all or nothing.
	Check Kind = iota
	// Reserve takes Cost units for Tenant on Node, to settle later.
	Reserve
	// Settle ends reservation Ref (a Reserve step's index) at Cost, its
	// real cost, on the node that reserved it.
	Settle
	// Reload loads every node with Policy.
	Reload
	// Kill drops Node's engine as a crash would (nothing it holds goes
	// back, nothing it does reaches the store again) and starts a new one
	// in its place. Its reservations never settle.
	Kill
	// Stop closes Node's engine (its leased credits go back) and starts a
	// new one in its place. Its reservations never settle.
	Stop
	// Restart replaces the store by an empty one, as a Redis without
	// persistence restarts.
	Restart
)

func (k Kind) String() string {
	return [...]string{"check", "reserve", "settle", "reload", "kill", "stop", "restart"}[k]
}

// Step is one event of a schedule.
type Step struct {
	At     time.Duration // since the schedule's start, on the true clock
	Kind   Kind
	Node   int
	Tenant string
	Cost   int64
	Ref    int   // Settle: the Reserve step's index
	Policy *Spec // Reload: the policy loaded
}

func (s Step) String() string {
	switch s.Kind {
	case Reload:
		return fmt.Sprintf("%v reload %v", s.At, *s.Policy)
	case Settle:
		return fmt.Sprintf("%v settle #%d at %d", s.At, s.Ref, s.Cost)
	case Kill, Stop:
		return fmt.Sprintf("%v %s node=%d", s.At, s.Kind, s.Node)
	case Restart:
		return fmt.Sprintf("%v restart the store", s.At)
	}
	return fmt.Sprintf("%v %s node=%d tenant=%s cost=%d", s.At, s.Kind, s.Node, s.Tenant, s.Cost)
}

// Schedule is a spec, a fleet size and its steps, in time order.
type Schedule struct {
	Seed  uint64
	Spec  Spec
	Nodes int
	// Skew is each node's clock's offset from the true one (nil: none):
	// a node's steps are stamped At + Skew[node].
	Skew []time.Duration
	// Steady schedules repeat one window's checks (one unit each) in every
	// window, with no reload and no cost: demand the forecasts of a fair
	// rule can rely on, where the table's least admissions are judged.
	Steady bool
	Steps  []Step
}

// Stamp is the instant node's clock reads at true instant at.
func (sc Schedule) Stamp(node int, at time.Duration) time.Duration {
	if node < len(sc.Skew) {
		return at + sc.Skew[node]
	}
	return at
}

// stampOf is the instant step i is stamped with: its node's clock (a
// settlement's, the node that reserved), or the true clock for the steps
// no node stamps.
func (sc Schedule) stampOf(i int) time.Duration {
	st := sc.Steps[i]
	switch st.Kind {
	case Check, Reserve:
		return sc.Stamp(st.Node, st.At)
	case Settle:
		return sc.Stamp(sc.Steps[st.Ref].Node, st.At)
	}
	return st.At
}

func (sc Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, steady %v, skew %v, %v\n", sc.Seed, sc.Nodes, sc.Steady, sc.Skew, sc.Spec)
	for i, s := range sc.Steps {
		fmt.Fprintf(&b, "  #%d %v\n", i, s)
	}
	return b.String()
}

// sortSteps orders the steps by time (a settle no earlier than its
// reservation), stably, and renumbers the references.
func sortSteps(sc *Schedule) {
	for i, s := range sc.Steps {
		if s.Kind == Settle && s.At < sc.Steps[s.Ref].At {
			sc.Steps[i].At = sc.Steps[s.Ref].At
		}
	}
	idx := make([]int, len(sc.Steps))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(sc.Steps[a].At, sc.Steps[b].At) })
	pos := make([]int, len(idx))
	out := make([]Step, len(idx))
	for newi, old := range idx {
		pos[old] = newi
		out[newi] = sc.Steps[old]
	}
	for i := range out {
		if out[i].Kind == Settle {
			out[i].Ref = pos[out[i].Ref]
		}
	}
	sc.Steps = out
}
