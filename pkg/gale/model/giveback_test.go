package model

import (
	"fmt"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// The give-back paths — refunds, negative hits, returns to L2 — and the
// low-water refill, explored as pkg/gale performs them (issue 8). Each space
// is small enough to explore under -race in well under a second; the counts
// are pinned as in pinnedSpaces.
type giveBackSpace struct {
	cfg         Config
	states      int
	transitions int
}

func (g giveBackSpace) name() string {
	c := g.cfg
	mode := "uncoupled"
	if c.Coupled {
		mode = "coupled"
	}
	return fmt.Sprintf("N=%d/%s/L=%d/refunds=%d/negative=%d/returns=%v/low_water=%d", c.Nodes, mode, c.Limit, c.Refunds, c.NegativeHits, c.Returns, c.LowWater)
}

// bound is what the README states for the space's mode: Limit coupled, the
// uncoupled bound (with or without a low-water refill) otherwise.
func (g giveBackSpace) bound() int {
	if g.cfg.Coupled {
		return g.cfg.Limit
	}
	return g.cfg.UncoupledBound()
}

// giveBackSpaces is one space per path alone, at the bound checks'
// parameters, for N up to 3 (N = 4 adds nothing coupled: Limit/Batch = 3
// leases fill a window), and every path at once on a smaller limit.
func giveBackSpaces() []giveBackSpace {
	type counts struct{ states, transitions int }
	pinned := map[string]counts{}
	for _, p := range pinnedGiveBacks {
		pinned[p.name] = counts{p.states, p.transitions}
	}
	var out []giveBackSpace
	for _, coupled := range []bool{true, false} {
		for _, n := range []int{1, 2, 3} {
			for _, c := range []Config{
				{Refunds: 1},
				{Refunds: 2},
				{NegativeHits: 2},
				{Returns: true},
				{LowWater: 1},
				{LowWater: 2},
			} {
				if c.Refunds > 0 && !coupled && n > 2 || c.Refunds == 2 && (n > 2 || !coupled) {
					continue // uncoupled refund spaces grow fastest: 3·10⁵ states at N=3
				}
				c.Nodes, c.Coupled = n, coupled
				c.Limit, c.Batch, c.Windows = boundLimit, boundBatch, boundWindows
				out = append(out, giveBackSpace{cfg: c})
			}
			if n <= 2 && (coupled || n == 1) {
				out = append(out, giveBackSpace{cfg: Config{Nodes: n, Coupled: coupled, Limit: 6, Batch: 3, Windows: 3, Refunds: 1, NegativeHits: 1, Returns: true, LowWater: 1}})
			}
		}
	}
	for i := range out {
		p := pinned[out[i].name()]
		out[i].states, out[i].transitions = p.states, p.transitions
	}
	return out
}

// pinnedGiveBacks pins the counts of giveBackSpaces by name.
var pinnedGiveBacks = []struct {
	name                string
	states, transitions int
}{
	{"N=1/coupled/L=9/refunds=1/negative=0/returns=false/low_water=0", 91, 238},
	{"N=1/coupled/L=9/refunds=2/negative=0/returns=false/low_water=0", 139, 406},
	{"N=1/coupled/L=9/refunds=0/negative=2/returns=false/low_water=0", 147, 325},
	{"N=1/coupled/L=9/refunds=0/negative=0/returns=true/low_water=0", 223, 533},
	{"N=1/coupled/L=9/refunds=0/negative=0/returns=false/low_water=1", 70, 130},
	{"N=1/coupled/L=9/refunds=0/negative=0/returns=false/low_water=2", 82, 163},
	{"N=1/coupled/L=6/refunds=1/negative=1/returns=true/low_water=1", 2596, 8788},
	{"N=2/coupled/L=9/refunds=1/negative=0/returns=false/low_water=0", 465, 1916},
	{"N=2/coupled/L=9/refunds=2/negative=0/returns=false/low_water=0", 853, 3905},
	{"N=2/coupled/L=9/refunds=0/negative=2/returns=false/low_water=0", 1047, 3513},
	{"N=2/coupled/L=9/refunds=0/negative=0/returns=true/low_water=0", 744, 2735},
	{"N=2/coupled/L=9/refunds=0/negative=0/returns=false/low_water=1", 230, 631},
	{"N=2/coupled/L=9/refunds=0/negative=0/returns=false/low_water=2", 304, 900},
	{"N=2/coupled/L=6/refunds=1/negative=1/returns=true/low_water=1", 45671, 245348},
	{"N=3/coupled/L=9/refunds=1/negative=0/returns=false/low_water=0", 1098, 5659},
	{"N=3/coupled/L=9/refunds=0/negative=2/returns=false/low_water=0", 2893, 11787},
	{"N=3/coupled/L=9/refunds=0/negative=0/returns=true/low_water=0", 1600, 7633},
	{"N=3/coupled/L=9/refunds=0/negative=0/returns=false/low_water=1", 514, 1783},
	{"N=3/coupled/L=9/refunds=0/negative=0/returns=false/low_water=2", 741, 2772},
	{"N=1/uncoupled/L=9/refunds=1/negative=0/returns=false/low_water=0", 1000, 2627},
	{"N=1/uncoupled/L=9/refunds=0/negative=2/returns=false/low_water=0", 319, 692},
	{"N=1/uncoupled/L=9/refunds=0/negative=0/returns=true/low_water=0", 565, 1325},
	{"N=1/uncoupled/L=9/refunds=0/negative=0/returns=false/low_water=1", 409, 765},
	{"N=1/uncoupled/L=9/refunds=0/negative=0/returns=false/low_water=2", 1057, 2110},
	{"N=1/uncoupled/L=6/refunds=1/negative=1/returns=true/low_water=1", 22750, 69382},
	{"N=2/uncoupled/L=9/refunds=1/negative=0/returns=false/low_water=0", 30898, 136519},
	{"N=2/uncoupled/L=9/refunds=0/negative=2/returns=false/low_water=0", 7006, 22482},
	{"N=2/uncoupled/L=9/refunds=0/negative=0/returns=true/low_water=0", 4494, 17340},
	{"N=2/uncoupled/L=9/refunds=0/negative=0/returns=false/low_water=1", 3121, 9140},
	{"N=2/uncoupled/L=9/refunds=0/negative=0/returns=false/low_water=2", 10195, 32887},
	{"N=3/uncoupled/L=9/refunds=0/negative=2/returns=false/low_water=0", 87247, 360336},
	{"N=3/uncoupled/L=9/refunds=0/negative=0/returns=true/low_water=0", 20452, 109007},
	{"N=3/uncoupled/L=9/refunds=0/negative=0/returns=false/low_water=1", 13207, 52232},
	{"N=3/uncoupled/L=9/refunds=0/negative=0/returns=false/low_water=2", 53383, 235247},
}

// invariants are the give-back paths' safety properties: a window's net
// admissions stay within bound, nothing gives back more than its window
// consumed, and L2 stays within 0..Limit.
func invariants(c Config, bound int) func(State) bool {
	return func(s State) bool {
		return s.Admitted <= bound && s.Consumed >= 0 && s.L2 >= 0 && s.L2 <= c.Limit
	}
}

// TestGiveBacksHoldTheBounds is issue 8's model check: with refunds (across
// boundaries included), negative hits, returns and the low-water refill, a
// window-coupled fleet admits at most Limit per window and uncoupled leasing
// at most the README's bound; both are reached, and the uncoupled one is
// tight with a counter-example to one less that replays.
func TestGiveBacksHoldTheBounds(t *testing.T) {
	for _, g := range giveBackSpaces() {
		t.Run(g.name(), func(t *testing.T) {
			sp, err := Explore(g.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if sp.States() != g.states || sp.Transitions() != g.transitions {
				t.Errorf("explored %d states and %d transitions, pinned %d and %d: the model changed", sp.States(), sp.Transitions(), g.states, g.transitions)
			}
			bound := g.bound()
			if tr, bad := sp.Find(invariants(g.cfg, bound)); bad {
				t.Fatalf("an invariant breaks (bound %d):\n%v", bound, tr)
			}
			if sp.MaxAdmitted() != bound {
				t.Fatalf("max admitted %d, want exactly %d", sp.MaxAdmitted(), bound)
			}
			tr, bad := sp.Find(admittedAtMost(bound - 1))
			if !bad {
				t.Fatalf("admitted ≤ %d holds: the bound is not reached", bound-1)
			}
			checkTrace(t, g.cfg, tr)
		})
	}
}

// TestMutationsAreFound puts each hole of issue 8 back — the code as it was
// before its fix — and checks that the model finds a counter-example on its
// own, with a trace that replays.
func TestMutationsAreFound(t *testing.T) {
	base := Config{Nodes: 2, Limit: boundLimit, Batch: boundBatch, Windows: 3}
	for _, m := range []struct {
		name string
		cfg  Config
		// broken is the invariant the hole breaks.
		broken func(State) bool
	}{
		{
			// Hole 1: a unit taken in window W refunded into W+1's credits.
			name:   "refund into the next window's credits",
			cfg:    Config{Coupled: true, Refunds: 1, fault: gale.FaultUncheckedGiveBack},
			broken: admittedAtMost(boundLimit),
		},
		{
			// Hole 2: a negative hit restores units the node never served.
			name: "negative hit mints credits",
			// Net admissions stay within Limit — the minted units are
			// netted out — but the window serves more than its Limit
			// gross: what was given back exceeds what was consumed.
			cfg:    Config{Coupled: true, NegativeHits: 2, fault: gale.FaultUncheckedGiveBack},
			broken: func(s State) bool { return s.Consumed >= 0 },
		},
		{
			// Hole 3: a refill at low water asks a whole batch, so a node
			// carries LowWater + Batch credits over.
			name:   "low-water refill of a whole batch",
			cfg:    Config{LowWater: 2, fault: gale.FaultFullBatchRefill},
			broken: admittedAtMost(boundLimit + 2*boundBatch),
		},
		{
			name:   "coupled credits carried over the roll",
			cfg:    Config{Coupled: true, fault: gale.FaultCarryCoupledCredits},
			broken: admittedAtMost(boundLimit),
		},
		{
			name:   "a second lease with a refill in flight",
			cfg:    Config{LowWater: 2, fault: gale.FaultTwoLeases},
			broken: admittedAtMost(boundLimit + 2*boundBatch),
		},
	} {
		t.Run(m.name, func(t *testing.T) {
			c := m.cfg
			c.Nodes, c.Limit, c.Batch, c.Windows = base.Nodes, base.Limit, base.Batch, base.Windows
			sp, err := Explore(c)
			if err != nil {
				t.Fatal(err)
			}
			tr, bad := sp.Find(m.broken)
			if !bad {
				t.Fatalf("the model does not find the hole (%d states, max admitted %d)", sp.States(), sp.MaxAdmitted())
			}
			checkTrace(t, c, tr)
			t.Logf("%d states; counter-example (%d steps):\n%v", sp.States(), len(tr.Steps), tr)
		})
	}
}
