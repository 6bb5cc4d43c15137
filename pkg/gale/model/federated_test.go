package model

import (
	"fmt"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// The federated model's parameters (federated.go): K regions share Limit 4
// per window, each leasing Batch 2 from L3, each with up to 2 reconciles in
// flight, over 2 windows. Two windows are enough for any number of them:
// at a roll every grant dies and every reconcile in flight becomes one of an
// ended window, so nothing live crosses a boundary and every window starts
// as the second does, but for dead keys and ended reconciles, which change
// nothing (TestFederatedTwoWindowsSuffice). Two reconciles in flight let a
// region drain again while the retry of its last reconcile is in flight.
// K = 8 explores in under 2 s with -race.
const (
	fedLimit      = 4
	fedBatch      = 2
	fedWindows    = 2
	fedReconciles = 2
)

func fedConfig(regions int) Config {
	return Config{Nodes: regions, Limit: fedLimit, Batch: fedBatch, Windows: fedWindows, Coupled: true, Returns: true, Reconciles: fedReconciles}
}

// pinnedFederated pins the federated spaces' counts, as pinnedSpaces does,
// so that a change to the machine or the model that changes them is seen:
// K ∈ {1, 2, 4, 8} at the parameters above, and K ∈ {1, 2, 4} at Limit 6,
// Batch 3, one reconcile in flight, where leftovers are 1 or 2 and grants
// can be partial (K = 8 there is 10 s under -race).
var pinnedFederated = []struct {
	regions, limit, batch, reconciles int
	states, transitions               int
}{
	{1, fedLimit, fedBatch, fedReconciles, 132, 447},
	{2, fedLimit, fedBatch, fedReconciles, 727, 4183},
	{4, fedLimit, fedBatch, fedReconciles, 3624, 32051},
	{8, fedLimit, fedBatch, fedReconciles, 4823, 50943},
	{1, 6, 3, 1, 197, 582},
	{2, 6, 3, 1, 834, 4082},
	{4, 6, 3, 1, 5010, 42788},
}

// TestFederatedBound is the federated bound: for K ∈ {1, 2, 4, 8} regions,
// with reconciles delivered once, retried, delivered after the boundary or
// lost, no window admits more than Limit, L3's count stays within 0..Limit,
// and Limit is reached.
func TestFederatedBound(t *testing.T) {
	for _, p := range pinnedFederated {
		t.Run(fmt.Sprintf("K=%d/L=%d/B=%d/R=%d", p.regions, p.limit, p.batch, p.reconciles), func(t *testing.T) {
			c := fedConfig(p.regions)
			c.Limit, c.Batch, c.Reconciles = p.limit, p.batch, p.reconciles
			sp, err := Explore(c)
			if err != nil {
				t.Fatal(err)
			}
			if sp.States() != p.states || sp.Transitions() != p.transitions {
				t.Errorf("explored %d states and %d transitions, pinned %d and %d: the model changed", sp.States(), sp.Transitions(), p.states, p.transitions)
			}
			if tr, bad := sp.Find(invariants(c, c.Limit)); bad {
				t.Fatalf("an invariant breaks (admitted ≤ Limit %d, consumed ≥ 0, 0 ≤ L3 ≤ Limit), shortest counter-example:\n%v", c.Limit, tr)
			}
			if sp.MaxAdmitted() != c.Limit {
				t.Fatalf("max admitted %d, want exactly Limit %d", sp.MaxAdmitted(), c.Limit)
			}
			tr, bad := sp.Find(admittedAtMost(c.Limit - 1))
			if !bad {
				t.Fatalf("admitted ≤ %d holds: Limit is not reached", c.Limit-1)
			}
			checkTrace(t, c, tr)
		})
	}
}

// TestFederatedTwoWindowsSuffice checks what lets the bound checks stop at
// two windows: nothing a window granted crosses its boundary. Right after
// every roll each region holds no credits, no lease in flight, no denial
// of the new window, and only reconciles of ended windows, which L3 answers
// Expired: a key whose credits died leases anew at its next check, as a
// forgotten one does, and an ended reconcile can only leave the network.
// So each window starts as the second does, up to inert leftovers, and
// admits what the second can. Three windows are explored, and hold the
// bound, as a check of the argument.
func TestFederatedTwoWindowsSuffice(t *testing.T) {
	for _, k := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
			c := fedConfig(k)
			c.Windows = 3
			sp, err := Explore(c)
			if err != nil {
				t.Fatal(err)
			}
			if tr, bad := sp.Find(invariants(c, fedLimit)); bad || sp.MaxAdmitted() != fedLimit {
				t.Fatalf("three windows: max admitted %d, want Limit %d; counter-example:\n%v", sp.MaxAdmitted(), fedLimit, tr)
			}
			t.Logf("three windows: %d states, %d transitions, max admitted %d", sp.States(), sp.Transitions(), sp.MaxAdmitted())
			for i := range sp.States() {
				for _, n := range c.Next(sp.State(i)) {
					if n.Step.Kind != Roll {
						continue
					}
					s, now := n.After, instant(n.After.Window)
					for _, r := range s.Nodes {
						key := r.Key
						live := key.Credits > 0 || key.Lease != 0 || now.Before(key.DenyUntil) || key.Used > 0
						for _, rec := range r.Reconciles {
							live = live || rec.Leftover > 0 && !rec.Ended
						}
						if live {
							t.Fatalf("a region carries something live into window %d: %v\n%v", s.Window, r, sp.Trace(i))
						}
					}
				}
			}
		})
	}
}

// TestFederatedSymmetry checks the region symmetry with reconciles in
// flight (the argument at the top of federated.go) against an explorer
// without it, and that the trace to every state replays.
func TestFederatedSymmetry(t *testing.T) {
	checkNaive(t, fedConfig(3))
	sp, err := Explore(fedConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	checkEveryTrace(t, "K=2", sp)
}

// TestFederatedMutationsAreFound breaks what the federated bound rests on,
// one hole at a time, and checks that the explorer finds a window admitting
// more than Limit on its own, with a shortest trace that replays and shows
// the hole at work.
func TestFederatedMutationsAreFound(t *testing.T) {
	for _, m := range []struct {
		name  string
		fault gale.Fault
		coord coordinatorFault
		// shows reports whether the trace exercises the hole.
		shows func(Trace) bool
	}{
		{
			// A region's escrow outlives the window that granted it.
			name:  "grants carried over the boundary",
			fault: gale.FaultCarryCoupledCredits,
			shows: servesCarried,
		},
		{
			// L3 ignores the marker: a retried reconcile is applied twice.
			name:  "a non-idempotent reconcile",
			coord: faultNoMarker,
			shows: func(tr Trace) bool { return applied(tr, func(r Reconcile) bool { return r.Applied }) > 0 },
		},
		{
			// L3 credits a reconcile to the window in place, not the one
			// that granted its units.
			name:  "a reconcile credited to the next window",
			coord: faultWrongWindow,
			shows: func(tr Trace) bool { return applied(tr, func(r Reconcile) bool { return r.Ended }) > 0 },
		},
	} {
		t.Run(m.name, func(t *testing.T) {
			c := fedConfig(2)
			c.fault, c.coordFault = m.fault, m.coord
			// The broken spaces are unbounded (a retried reconcile applied
			// twice lets the fleet admit one more per reconcile, without
			// end): explore them up to the first break.
			sp, err := exploreUntil(c, func(s State) bool { return s.Admitted > fedLimit })
			if err != nil {
				t.Fatal(err)
			}
			tr, bad := sp.Find(admittedAtMost(fedLimit))
			if !bad {
				t.Fatalf("the model does not find the hole (%d states, max admitted %d)", sp.States(), sp.MaxAdmitted())
			}
			checkTrace(t, c, tr)
			if tr.Last().Admitted <= fedLimit || !m.shows(tr) {
				t.Fatalf("the counter-example does not show the hole:\n%v", tr)
			}
			t.Logf("%d states; counter-example (%d steps):\n%v", sp.States(), len(tr.Steps), tr)
		})
	}
}

// applied counts the deliveries in tr that L3 applied of a reconcile
// satisfying of, as it was in flight.
func applied(tr Trace, of func(Reconcile) bool) int {
	k, before := 0, tr.Initial
	for _, s := range tr.Steps {
		if s.Step.Outcome == federation.Applied && of(before.Nodes[s.Step.Node].Reconciles[s.Step.Slot]) {
			k++
		}
		before = s.After
	}
	return k
}

// servesCarried reports whether a region in tr serves a check in a window
// before leasing in it: from credits of an earlier window.
func servesCarried(tr Trace) bool {
	leased := map[int]bool{}
	for _, s := range tr.Steps {
		switch s.Step.Kind {
		case Roll:
			clear(leased)
		case LeaseServe:
			leased[s.Step.Node] = true
		case Serve:
			if !leased[s.Step.Node] {
				return true
			}
		}
	}
	return false
}

// TestFederatedReconcileAnswers walks scripted runs of two regions through
// the network's transitions, one named case each, and checks L3's answer
// to the last delivery and what L3 can still grant.
func TestFederatedReconcileAnswers(t *testing.T) {
	lease := Step{Kind: LeaseServe, Node: 0}
	send := Step{Kind: Send, Node: 0}
	for _, tc := range []struct {
		name  string
		steps []Step
		want  federation.Reconciled // L3's answer to the last step
		l3    int                   // what L3 can grant after it
	}{
		{"applied: the leftover is pooled", []Step{lease, send, {Kind: Deliver}}, federation.Applied, 3},
		{"a retry is a duplicate", []Step{lease, send, {Kind: DeliverRetry}, {Kind: Deliver}}, federation.Duplicate, 3},
		{"a retry applied once", []Step{lease, send, {Kind: DeliverRetry}}, federation.Applied, 3},
		{"after the boundary: expired", []Step{lease, send, {Kind: Roll}, {Kind: Deliver}}, federation.Expired, fedLimit},
		{"a retry after the boundary: expired", []Step{lease, send, {Kind: DeliverRetry}, {Kind: Roll}, {Kind: Deliver}}, federation.Expired, fedLimit},
		{"lost: the leftover with it", []Step{lease, send, {Kind: Drop}}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fedConfig(2)
			s, last := c.Initial(), Step{}
			for _, want := range tc.steps {
				found := false
				for _, n := range c.Next(s) {
					if n.Step.Kind == want.Kind && n.Step.Node == want.Node {
						s, last, found = n.After, n.Step, true
						break
					}
				}
				if !found {
					t.Fatalf("no %v step in %v", want.Kind, s)
				}
			}
			if last.Outcome != tc.want || s.L2 != tc.l3 {
				t.Fatalf("answered %v, L3 can grant %d; want %v and %d (last state %v)", last.Outcome, s.L2, tc.want, tc.l3, s)
			}
		})
	}
}

func TestFederatedValidate(t *testing.T) {
	for _, c := range []Config{
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, Coupled: true, Returns: true, Reconciles: 3},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, Coupled: true, Returns: true, Reconciles: -1},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, Returns: true, Reconciles: 1},
		{Nodes: 2, Limit: 4, Batch: 2, Windows: 2, Coupled: true, Reconciles: 1},
	} {
		if _, err := Explore(c); err == nil {
			t.Errorf("Explore(%+v) accepted an invalid config", c)
		}
	}
}
