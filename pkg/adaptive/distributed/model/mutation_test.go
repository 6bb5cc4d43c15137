package model

import (
	"testing"
)

// TestReserveTermsAreEachNecessary shows that acknowledged handoff needs
// both of its reserve terms, the unacknowledged high and the reported in
// flight count: with either left out (Mutation, on the same space as the
// faithful N=2, L=2, flight 1) the model finds Σ inflight > L, and with
// only the in flight count, Σ share > L as well.
func TestReserveTermsAreEachNecessary(t *testing.T) {
	withoutHandoff := noHandoffSpaces[0] // N=2, L=2, flight 1
	for _, tc := range []struct {
		sp        space
		globalCap bool // whether Σ share ≤ L still holds
	}{
		{space{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Mutation: ReserveIgnoresInflight}, 1602, 5632, false}, true},
		// The same space as without handoff, state for state.
		{space{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Mutation: ReserveIgnoresHigh}, withoutHandoff.states, withoutHandoff.transitions, false}, true},
		{space{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Mutation: ReserveInflightOnly}, 3876, 14980, false}, false},
	} {
		t.Run(tc.sp.name(), func(t *testing.T) {
			t.Parallel()
			r := check(t, tc.sp)
			L := tc.sp.c.Global
			if i := r.InflightCapBroken; i < 0 {
				t.Fatalf("Σ inflight ≤ %d everywhere: the mutation is not found", L)
			}
			if tc.globalCap != (r.GlobalCapBroken < 0) {
				t.Fatalf("Σ share ≤ %d holds: %v, want %v", L, r.GlobalCapBroken < 0, tc.globalCap)
			}
			t.Logf("shortest run to Σ inflight > %d (%d steps):\n%v", L, r.Space.Depth(r.InflightCapBroken), r.Trace(r.InflightCapBroken))
			if r.GlobalCapBroken >= 0 {
				t.Logf("shortest run to Σ share > %d:\n%v", L, r.Trace(r.GlobalCapBroken))
			}
		})
	}
}

// TestTornReportBreaksInflightCap shows why a report's snapshot must be
// atomic: a node that samples its in flight count, then applies a grant and
// admits under its older, larger share, and then reports the fresh
// generation with the stale count, is acknowledged on a count below what
// it holds — and with handoff on, Σ inflight > L.
func TestTornReportBreaksInflightCap(t *testing.T) {
	sp := space{Config{Nodes: 2, Global: 2, Flight: 1, Handoff: true, Torn: true}, 31136, 127868, false}
	r := check(t, sp)
	if r.GlobalCapBroken >= 0 {
		t.Fatalf("Σ share > L:\n%v", r.Trace(r.GlobalCapBroken))
	}
	if r.InflightCapBroken < 0 {
		t.Fatal("Σ inflight ≤ L everywhere with torn reports")
	}
	tr := r.Trace(r.InflightCapBroken)
	// The run must send a torn report: one whose count is below the node's
	// at the send, with a generation the node applied after sampling.
	torn := false
	prev := tr.Initial
	for k, st := range tr.Steps {
		if st.Kind == Send && int(st.Msg.Inflight) < int(prev.Nodes[st.Node].Inflight) {
			torn = true
		}
		prev = tr.States[k]
	}
	if !torn {
		t.Fatalf("the counter-example sends no torn report:\n%v", tr)
	}
	t.Logf("shortest run to Σ inflight > L (%d steps):\n%v", len(tr.Steps), tr)
}
