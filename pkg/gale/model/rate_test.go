package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// rateSpaces are the rate model's instances the bound is checked on, with
// their pinned counts.
var rateSpaces = []struct {
	name                string
	cfg                 RateConfig
	states, transitions int
}{
	{"gcra, 2 nodes, burst 3, batch 3", RateConfig{Nodes: 2, Burst: 3, Batch: 3, Algorithm: gale.GCRA}, 444, 1232},
	{"gcra, 3 nodes, burst 3, batch 2, drains", RateConfig{Nodes: 3, Burst: 3, Batch: 2, Algorithm: gale.GCRA, Returns: true}, 2799, 16940},
	{"token bucket, 2 nodes, burst 3, batch 3, drains", RateConfig{Nodes: 2, Burst: 3, Batch: 3, Algorithm: gale.TokenBucket, Returns: true}, 706, 3167},
	{"token bucket, 3 nodes, burst 4, batch 2, drains", RateConfig{Nodes: 3, Burst: 4, Batch: 2, Algorithm: gale.TokenBucket, Returns: true}, 6560, 40176},
}

// TestRateBound: leased GCRA and token bucket, window-coupled (credits
// decay as the store's bucket drains: gale/decay.go), explored over every
// interleaving of checks, leases, drains and the passing of time: no state
// has an admission one bucket of the rule would refuse — the fleet admits
// at most Burst + rate·t over any interval, for any N — and the reference
// bucket is emptied (the bound is reached).
func TestRateBound(t *testing.T) {
	for _, tc := range rateSpaces {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			sp, err := ExploreRate(c, 1_000_000)
			if err != nil {
				t.Fatal(err)
			}
			if path, over := sp.Over(); over {
				t.Fatalf("an admission one bucket refuses:\n%s", rateWords(path))
			}
			full := false
			for _, s := range sp.states {
				_, o := c.rule().Take(s.Reference, s.Now.UnixMicro(), 1, 1)
				full = full || o.Granted == 0
			}
			if !full {
				t.Fatal("no state empties the reference bucket: the bound is never reached")
			}
			if sp.States() != tc.states || sp.Transitions() != tc.transitions {
				t.Errorf("%d states, %d transitions; pinned %d and %d (PROOFS.md)", sp.States(), sp.Transitions(), tc.states, tc.transitions)
			}
			t.Logf("%d states, %d transitions", sp.States(), sp.Transitions())
		})
	}
}

// TestRateHolesAreFound: credits that carry whole (uncoupled, or the
// machine's decay taken out) and decaying credits given back to the store
// each break the bound, found with a shortest trace.
func TestRateHolesAreFound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   RateConfig
		steps int
	}{
		{"uncoupled gcra", RateConfig{Nodes: 1, Burst: 3, Batch: 3, Algorithm: gale.GCRA, Uncoupled: true}, 7},
		{"gcra without decay", RateConfig{Nodes: 1, Burst: 3, Batch: 3, Algorithm: gale.GCRA, fault: gale.FaultUndecayedCredits}, 7},
		{"token bucket without decay", RateConfig{Nodes: 1, Burst: 3, Batch: 3, Algorithm: gale.TokenBucket, fault: gale.FaultUndecayedCredits}, 7},
		{"gcra, decaying credits given back", RateConfig{Nodes: 3, Burst: 3, Batch: 2, Algorithm: gale.GCRA, Returns: true, fault: gale.FaultDecayedGiveBack}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp, err := ExploreRate(tc.cfg, 1_000_000)
			if err != nil {
				t.Fatal(err)
			}
			path, over := sp.Over()
			if !over {
				t.Fatalf("not found in %d states", sp.States())
			}
			if len(path) != tc.steps {
				t.Errorf("found in %d steps, pinned %d (PROOFS.md)", len(path), tc.steps)
			}
			t.Logf("found in %d steps, %d states:\n%s", len(path), sp.States(), rateWords(path))
		})
	}
}

func rateWords(path []RateStep) string {
	var b strings.Builder
	for _, s := range path {
		fmt.Fprintf(&b, "  %v\n", s)
	}
	return b.String()
}
