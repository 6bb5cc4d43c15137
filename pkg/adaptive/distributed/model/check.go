package model

import (
	"fmt"
	"strings"
)

// Result is the explored space of one Config and what was measured on it:
// the two caps of the heartbeat protocol, checked in every reachable state,
// and the largest sums reached.
type Result struct {
	Config Config
	Space  *Space[State, Step]
	// MaxShares and MaxInflight are the largest Σ recorded share and Σ in
	// flight (over the nodes' actual counts) of any reachable state, and
	// MaxInflightAt the first state, in BFS order, reaching the latter.
	MaxShares, MaxInflight, MaxInflightAt int
	// GlobalCapBroken and InflightCapBroken are the first states, in BFS
	// order, with Σ recorded share > Global and Σ in flight > Global; −1
	// when none is: every reachable state keeps the cap.
	GlobalCapBroken, InflightCapBroken int
	// ReserveCapBroken and UncoveredAt are the first states with Σ reserve
	// > Global, and with a node whose in flight count is above its
	// record's reserve (or which has none); −1 when none is. Together they
	// are the inductive reason for InflightCap: Σ in flight ≤ Σ reserve ≤
	// Global.
	ReserveCapBroken, UncoveredAt int
}

// Check explores every state reachable under c and measures the caps. It
// returns an error for an invalid config, or when the space has more than
// maxStates states (0: no bound).
func Check(c Config, maxStates int) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := &Result{Config: c, GlobalCapBroken: -1, InflightCapBroken: -1, ReserveCapBroken: -1, UncoveredAt: -1}
	g := c.Graph()
	g.MaxStates = maxStates
	sp, err := Explore(g, 0, func(i int, s State) bool {
		shares, inflight := s.Shares(), s.Inflight()
		r.MaxShares = max(r.MaxShares, shares)
		if inflight > r.MaxInflight {
			r.MaxInflight, r.MaxInflightAt = inflight, i
		}
		if shares > c.Global && r.GlobalCapBroken < 0 {
			r.GlobalCapBroken = i
		}
		if inflight > c.Global && r.InflightCapBroken < 0 {
			r.InflightCapBroken = i
		}
		reserves, covered := s.reserves(c.Handoff)
		if reserves > c.Global && r.ReserveCapBroken < 0 {
			r.ReserveCapBroken = i
		}
		if !covered && r.UncoveredAt < 0 {
			r.UncoveredAt = i
		}
		return true
	})
	r.Space = sp
	return r, err
}

// NoHandoffBound is the most Σ in flight can reach without Handoff, under
// Split Equal, on a fleet of nodes that only joins (no eviction):
// Σ_{k=1..nodes} ⌈global/k⌉.
//
// Argument: a node admits only below the share it applied, so its in
// flight count never exceeds the largest share it ever applied. A share is
// at most its target, ⌈global/live⌉ with live the records at the grant,
// the reporter's included; the k-th node to be recorded is granted only
// when at least k are live. So the k-th node holds at most ⌈global/k⌉.
// The model finds the bound reached in every space explored: each node
// keeps admitting under the largest share it was granted (the first under
// the whole ceiling it was granted alone) until it applies a lowered one,
// while the others are granted what the lowered shares leave — 1.5 ×
// global for two nodes at an even global, 2 × global for three at 2 and 3.
func NoHandoffBound(nodes, global int) int {
	sum := 0
	for k := 1; k <= nodes; k++ {
		sum += (global + k - 1) / k
	}
	return sum
}

// Shares is Σ recorded share.
func (s State) Shares() int {
	sum := 0
	for _, r := range s.Records {
		sum += r.Share
	}
	return sum
}

// reserves returns Σ reserve over the records, the reserve being what Beat
// holds back for a record from the others' shares (its doc comment, step
// 5): max(Share, Inflight), or with handoff, until the record acknowledges
// its generation, max(High, Inflight). covered reports whether every
// node's in flight count is within its record's reserve.
func (s State) reserves(handoff bool) (sum int, covered bool) {
	covered = true
	for i, n := range s.Fleet() {
		r, ok := record(s.Records, nodeNames[i])
		reserve := 0
		if ok {
			reserve = max(r.Share, r.Inflight)
			if handoff && r.AppliedGen < r.Gen {
				reserve = max(r.High, r.Inflight)
			}
		}
		sum += reserve
		covered = covered && int(n.Inflight) <= reserve
	}
	return sum, covered
}

// Inflight is Σ in flight over the nodes.
func (s State) Inflight() int {
	sum := 0
	for _, n := range s.Fleet() {
		sum += int(n.Inflight)
	}
	return sum
}

// Trace returns a shortest run from the initial state to state i, replayed
// on the concrete protocol (so with the real sequence numbers and
// generations).
func (r *Result) Trace(i int) Trace {
	steps := r.Space.Path(i)
	states, err := Replay(r.Config.Graph(), steps)
	if err != nil {
		panic(err) // a representative's path always replays: Explore kept it
	}
	return Trace{Initial: r.Config.Initial(), Steps: steps, States: states}
}

// Trace is a run: the steps from Initial and the state after each.
type Trace struct {
	Initial State
	Steps   []Step
	States  []State
}

// Last is the state the run ends in.
func (t Trace) Last() State {
	if len(t.States) == 0 {
		return t.Initial
	}
	return t.States[len(t.States)-1]
}

// String renders the run one step a line, each with the state after it.
func (t Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-72s %v\n", "initial", t.Initial)
	for k, st := range t.Steps {
		fmt.Fprintf(&b, "%-72s %v\n", st, t.States[k])
	}
	return b.String()
}

// String renders the state: Σ in flight, Σ share, then per node the
// coordinator's record {share, high, gen/acknowledged gen, reported in
// flight} and the node [applied share@gen, in flight, messages in flight].
func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Σinflight %d Σshare %d |", s.Inflight(), s.Shares())
	for i, n := range s.Fleet() {
		fmt.Fprintf(&b, " %s:", nodeNames[i])
		if r, ok := record(s.Records, nodeNames[i]); ok {
			fmt.Fprintf(&b, " rec{s%d h%d g%d/%d i%d}", r.Share, r.High, r.Gen, r.AppliedGen, r.Inflight)
		}
		fmt.Fprintf(&b, " node{s%d@%d i%d", n.Share, n.Gen, n.Inflight)
		if n.Sampled >= 0 {
			fmt.Fprintf(&b, " sampled %d", n.Sampled)
		}
		for _, m := range n.InFlight() {
			if m.Grant {
				fmt.Fprintf(&b, " ←s%d@%d", m.Share, m.Gen)
			} else {
				fmt.Fprintf(&b, " →#%d@%d i%d", m.Seq, m.Gen, m.Inflight)
			}
		}
		b.WriteString("}")
	}
	return b.String()
}
