package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// regionSpaces are the region model's instances the bounds are checked on,
// with their pinned counts (canonical states up to renaming regions and a
// region's processes).
var regionSpaces = []struct {
	name                string
	cfg                 RegionConfig
	states, transitions int
}{
	{"one region of two processes", RegionConfig{Regions: 1, Processes: 2, Limit: 2, Batch: 2, ProcessBatch: 1, Windows: 2, Reconciles: 1}, 731, 2333},
	{"two regions, outages, fail_closed", RegionConfig{Regions: 2, Processes: 1, Limit: 3, Batch: 3, ProcessBatch: 1, Windows: 2, Reconciles: 1, Outages: true}, 10734, 46850},
	{"two regions, outages, regional_only", RegionConfig{Regions: 2, Processes: 1, Limit: 2, Batch: 2, ProcessBatch: 2, Windows: 2, Reconciles: 1, Outage: federation.RegionalOnly, RegionalLimit: 2, Outages: true}, 248037, 1368112},
}

// TestRegionBound explores the real region machine (federation.
// RegionMachine) and the real leasing machine of each process, with
// replies that land after window boundaries, outages that begin and heal
// mid-window, and reconciles delivered, retried or lost: every state keeps
// the federated bound — a window admits at most the limit, plus each
// region in outage's regional limit under regional_only — and the regions
// never in outage in a window admit at most the limit together (no region
// gives the coordinator units it never granted). Both are reached.
func TestRegionBound(t *testing.T) {
	for _, tc := range regionSpaces {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			sp, err := ExploreRegions(c, 1_000_000, nil)
			if err != nil {
				t.Fatal(err)
			}
			if path, s, found := sp.Find(c.Holds); found {
				t.Fatalf("a state breaks the bound: admitted %d (bound %d), healthy regions %d:\n%s", s.Admitted, c.Bound(s), s.HealthyAdmitted(), words(path))
			}
			admitted, healthy := sp.Most()
			want := c.Limit
			if c.Outage == federation.RegionalOnly {
				want += c.Regions * c.RegionalLimit
			}
			if admitted != want || healthy != c.Limit {
				t.Fatalf("most admitted %d, by healthy regions %d; want the bounds %d and %d reached", admitted, healthy, want, c.Limit)
			}
			late := false
			for _, s := range sp.states {
				for _, r := range s.Regions {
					for _, p := range r.Procs {
						late = late || p.Reply != nil && p.Reply.Grant.WindowEnd.Before(windowEnd(s.Window))
					}
				}
			}
			if !late {
				t.Fatal("no state holds a reply whose window has ended: the model does not explore latency across a boundary")
			}
			if sp.States() != tc.states || sp.Transitions() != tc.transitions {
				t.Errorf("%d states, %d transitions; pinned %d and %d (PROOFS.md): update both if the model changed on purpose", sp.States(), sp.Transitions(), tc.states, tc.transitions)
			}
			t.Logf("%d states, %d transitions, most admitted %d (healthy regions %d)", sp.States(), sp.Transitions(), admitted, healthy)
		})
	}
}

// TestRegionFaultsAreFound: each hole the region once had, put back into
// the machine as a fault, is found by the explorer on its own, with a
// shortest trace that ends over the bound.
func TestRegionFaultsAreFound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   RegionConfig
		steps int
	}{
		{"the escrow's life measured from the refill", RegionConfig{Regions: 1, Processes: 1, Limit: 3, Batch: 3, ProcessBatch: 1, Windows: 2, Reconciles: 1, Fault: federation.FaultEscrowTTLFromRefill}, 8},
		// FaultRegionalToCoordinator is no longer reachable: the paced
		// regional budget grants one unit to a lease, which its check
		// spends at once, so no process holds regional units to give back
		// (issue 40, item 4; TestRegionalUnitsNeverGoToTheCoordinator).
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			sp, err := ExploreRegions(c, 1_000_000, func(s RegionState) bool { return !c.Holds(s) })
			if err != nil {
				t.Fatal(err)
			}
			path, s, found := sp.Find(c.Holds)
			if !found {
				t.Fatalf("the fault was not found in %d states", sp.States())
			}
			if err := c.replay(path, s); err != nil {
				t.Fatal(err)
			}
			if len(path) != tc.steps {
				t.Errorf("found in %d steps, pinned %d (PROOFS.md)", len(path), tc.steps)
			}
			t.Logf("found in %d steps, %d states: admitted %d (bound %d), healthy regions %d:\n%s", len(path), sp.States(), s.Admitted, c.Bound(s), s.HealthyAdmitted(), words(path))
		})
	}
}

// replay runs path from the initial state, each step the first enabled
// transition of its description, and checks that it ends in a state that
// breaks the bound, as last does.
func (c RegionConfig) replay(path []RegionStep, last RegionState) error {
	cur, err := replay(c.Initial(), c.visit, path)
	if err != nil {
		return err
	}
	if c.Holds(cur) || cur.Admitted != last.Admitted {
		return fmt.Errorf("the replay ends admitting %d (holds %v), the trace %d", cur.Admitted, c.Holds(cur), last.Admitted)
	}
	return nil
}

func words(path []RegionStep) string {
	var b strings.Builder
	for _, s := range path {
		fmt.Fprintf(&b, "  %v\n", s)
	}
	return b.String()
}
