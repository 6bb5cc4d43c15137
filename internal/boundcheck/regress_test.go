package boundcheck

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// regressions are schedules the checker found breaking the table, shrunk,
// kept so that what broke stays fixed.
var regressions = map[string]Schedule{
	// Issue 40, item 2, as the checker shrank seed 3 on the main of then:
	// a fair rule dropped the extra past a reservation when it no longer
	// fit, so reservations went on being admitted past the limit.
	"fair extra dropped": {Seed: 3, Nodes: 1, Spec: Spec{Fair: true, Mode: Strict, Batch: 5, Limits: []Limit{{Algorithm: FixedWindow, Period: Window, Count: 8}}}, Steps: []Step{
		{At: 19360530124, Kind: Reserve, Tenant: "t0", Cost: 1},
		{At: 31435294731, Kind: Check, Tenant: "t0", Cost: 1},
		{At: 31457480266, Kind: Reserve, Tenant: "t0", Cost: 2},
		{At: 32138830779, Kind: Settle, Ref: 0, Cost: 7},
		{At: 33670454124, Kind: Reserve, Tenant: "t0", Cost: 1},
		{At: 36743694552, Kind: Reserve, Tenant: "t0", Cost: 1},
	}},
	// Issue 40, item 1: 41 tenants asking once a second under a fair limit
	// of 40 per window: every share rounded down to 0, nothing admitted.
	"fair more tenants than units": steadyTenants(40, 41, 2),
}

// steadyTenants is a steady schedule: tenants each ask once per window,
// spread over it, for windows windows, under a fair limit.
func steadyTenants(limit int64, tenants, windows int) Schedule {
	sc := Schedule{Nodes: 1, Steady: true, Spec: Spec{Fair: true, Mode: Strict, Batch: 1, Limits: []Limit{{Algorithm: FixedWindow, Period: Window, Count: limit}}}}
	for w := range windows {
		for i := range tenants {
			at := time.Duration(w)*Window + time.Duration(i)*Window/time.Duration(tenants+1)
			sc.Steps = append(sc.Steps, Step{At: at, Kind: Check, Tenant: fmt.Sprintf("t%d", i), Cost: 1})
		}
	}
	return sc
}

// TestRegressions replays each schedule the checker found, judged by the
// table as the checker judges.
func TestRegressions(t *testing.T) {
	for name, sc := range regressions {
		t.Run(name, func(t *testing.T) {
			r, err := Run(context.Background(), sc, memory, "bc")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range r.Violations {
				t.Errorf("%v", v)
			}
		})
	}
}
