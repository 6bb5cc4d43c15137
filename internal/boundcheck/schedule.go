// Package boundcheck is a seeded, randomized fleet checker: it composes the
// engine's features (modes, fair rules with many tenants, costs with
// reservations a hostile client picks, reloads) on several engines sharing
// one store, plays a schedule drawn from a seed on a fake timeline, and
// judges every window from what the clients were told against the bounds
// table's row (Bounds). A failing schedule shrinks to a short one that
// still fails, printed so it can become a regression test.
//
// Every source of nondeterminism is the seed: the policy, the steps, the
// instants. The engines decide on the instants the schedule gives them
// (Decide's now), so a run on the memory store replays exactly.
package boundcheck

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Window is the length of every schedule's rate-limit window.
const Window = 10 * time.Second

// Mode is a rule's mode as policy YAML names it.
type Mode string

const (
	Strict     Mode = "strict"
	CachedDeny Mode = "cached_deny"
	Leased     Mode = "leased"
)

// Spec is a schedule's policy: one descriptor `tenant` with one limit per
// Window.
type Spec struct {
	Limit      int64
	Mode       Mode
	Batch      int64 // leased: the lease batch
	Fair       bool  // fairness: {tenant_key: tenant}
	MaxTenants int   // fair: max_tenants (0: the default)
}

// YAML is the spec's policy file with limit in place of Limit.
func (s Spec) YAML(limit int64) string {
	var b strings.Builder
	b.WriteString("domain: bc\ndescriptors:\n  - key: tenant\n")
	if !s.Fair { // a fair limit leases its budget itself: no mode
		fmt.Fprintf(&b, "    mode: %s\n", s.Mode)
		if s.Mode == Leased {
			fmt.Fprintf(&b, "    lease: {batch: %d}\n", s.Batch)
		}
	}
	if s.Fair {
		fmt.Fprintf(&b, "    fairness: {tenant_key: tenant")
		if s.MaxTenants > 0 {
			fmt.Fprintf(&b, ", max_tenants: %d", s.MaxTenants)
		}
		b.WriteString("}\n")
	}
	fmt.Fprintf(&b, "    rate_limit: {unit: second, unit_multiplier: %d, requests_per_unit: %d}\n", int(Window/time.Second), limit)
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
	// Reload loads every node with the spec at limit Cost.
	Reload
)

func (k Kind) String() string {
	return [...]string{"check", "reserve", "settle", "reload"}[k]
}

// Step is one event of a schedule.
type Step struct {
	At     time.Duration // since the schedule's start
	Kind   Kind
	Node   int
	Tenant string
	Cost   int64
	Ref    int // Settle: the Reserve step's index
}

func (s Step) String() string {
	switch s.Kind {
	case Reload:
		return fmt.Sprintf("%v reload limit=%d", s.At, s.Cost)
	case Settle:
		return fmt.Sprintf("%v settle #%d at %d", s.At, s.Ref, s.Cost)
	}
	return fmt.Sprintf("%v %s node=%d tenant=%s cost=%d", s.At, s.Kind, s.Node, s.Tenant, s.Cost)
}

// Schedule is a spec, a fleet size and its steps, in time order.
type Schedule struct {
	Seed  uint64
	Spec  Spec
	Nodes int
	// Steady schedules repeat one window's checks (one unit each) in every
	// window, with no reload and no cost: demand the forecasts of a fair
	// rule can rely on, where the table's least admissions are judged.
	Steady bool
	Steps  []Step
}

func (sc Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d nodes, steady %v, %+v\n", sc.Seed, sc.Nodes, sc.Steady, sc.Spec)
	for i, s := range sc.Steps {
		fmt.Fprintf(&b, "  #%d %v\n", i, s)
	}
	return b.String()
}

// Generate draws a schedule from seed: a policy mixing modes and fairness
// (often more tenants than the limit has units), 1–4 nodes, and 3–6
// windows of checks and reservations (a hostile client picks reservations
// of 1 and real costs far above them), with a reload now and then.
func Generate(seed uint64) Schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := Schedule{Seed: seed, Nodes: 1 + rng.IntN(4)}
	sp := &sc.Spec
	sp.Limit = 1 + rng.Int64N(60)
	sp.Mode = []Mode{Strict, CachedDeny, Leased}[rng.IntN(3)]
	sp.Batch = 1 + rng.Int64N(8)
	sp.Fair = rng.IntN(2) == 0
	if sp.Fair && rng.IntN(3) == 0 {
		sp.MaxTenants = 1 + rng.IntN(8)
	}
	tenants := 1 + rng.IntN(int(2*sp.Limit)+2) // past the limit's units, often
	costs := rng.IntN(3) == 0                  // reservations and settlements
	windows := 3 + rng.IntN(4)
	if rng.IntN(2) == 0 {
		sc.Steady = true
		calls := 1 + rng.IntN(int(3*sp.Limit)+5)
		var one []Step
		for range calls {
			one = append(one, Step{At: time.Duration(rng.Int64N(int64(Window))), Node: rng.IntN(sc.Nodes), Tenant: fmt.Sprintf("t%d", rng.IntN(tenants)), Cost: 1})
		}
		for w := range windows {
			for _, st := range one {
				st.At += time.Duration(w) * Window
				sc.Steps = append(sc.Steps, st)
			}
		}
		sortSteps(&sc)
		return sc
	}
	limit := sp.Limit
	var open []int // reservations not yet settled
	for w := range windows {
		start := time.Duration(w) * Window
		if w > 0 && rng.IntN(5) == 0 {
			limit = 1 + rng.Int64N(60)
			sc.Steps = append(sc.Steps, Step{At: start + time.Duration(rng.Int64N(int64(Window))), Kind: Reload, Cost: limit})
		}
		calls := 1 + rng.IntN(int(3*sp.Limit)+5)
		for range calls {
			st := Step{At: start + time.Duration(rng.Int64N(int64(Window))), Node: rng.IntN(sc.Nodes), Tenant: fmt.Sprintf("t%d", rng.IntN(tenants))}
			switch {
			case costs && rng.IntN(2) == 0:
				st.Kind = Reserve
				st.Cost = 1 + rng.Int64N(max(1, sp.Limit/4))
				if rng.IntN(2) == 0 {
					st.Cost = 1 // a hostile client reserves as little as it may
				}
			case costs && len(open) > 0 && rng.IntN(2) == 0:
				i := rng.IntN(len(open))
				st.Kind, st.Ref = Settle, open[i]
				open = append(open[:i], open[i+1:]...)
				st.Cost = rng.Int64N(2 * sp.Limit) // often far above its reservation
			default:
				st.Kind = Check
				st.Cost = 1
				if rng.IntN(4) == 0 {
					st.Cost = 1 + rng.Int64N(max(1, sp.Limit/3))
				}
			}
			sc.Steps = append(sc.Steps, st)
			if st.Kind == Reserve {
				open = append(open, len(sc.Steps)-1)
			}
		}
	}
	sortSteps(&sc)
	return sc
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
