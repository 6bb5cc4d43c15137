package boundcheck

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// fedRegressions are federated schedules the checker found breaking
// FederationRows, shrunk, kept so that what broke stays fixed.
var fedRegressions = map[string]FedSchedule{
	// Issue 40, item 4, as the checker shrank seed 59 (its first seed to
	// break a row with it): the regional budget is counted on the region's
	// clock, 196 ms behind the coordinator's, so the coordinator's window
	// 1 ([10 s, 20 s)), unreachable throughout, holds the end of the
	// regional window 0 and most of window 1: 13 units from the one and 12
	// from the other, 25 with regional_limit 14. Fails until the regional
	// budget is counted per coordinator window.
	"item 4: a regional budget per window of the region's clock": {Seed: 59, Spec: FedSpec{Limit: 40, ProbeAfter: 1000 * time.Millisecond, Regions: []FedRegion{
		{Outage: federation.RegionalOnly, RegionalLimit: 14, Escrow: true, Batch: 19, ProcBatch: 26, Skew: -196 * time.Millisecond, Procs: []time.Duration{0}},
	}}, Cuts: []Cut{
		{From: 9426140707, To: 30884077801, Regions: 0b1, Lands: true},
	}, Steps: []FedStep{
		{At: 10000001603, Region: 0, Proc: 0, Cost: 13},
		{At: 10852704331, Region: 0, Proc: 0, Cost: 12},
	}},
	// Issue 40, item 4 again, as the checker shrank seed 3491: regional
	// credits live until the region's window ends, 442 ms after the
	// coordinator's, so units a process leased from its regional budget
	// in window 1, during a cut, are admitted in window 2, which no outage
	// touches and whose 26 the coordinator grants whole: 27. Fails until
	// regional grants die with the coordinator's window.
	"item 4: regional credits into a window no outage touches": {Seed: 3491, Spec: FedSpec{Limit: 26, ProbeAfter: 1000 * time.Millisecond, Regions: []FedRegion{
		{Outage: federation.RegionalOnly, RegionalLimit: 13, Escrow: true, Batch: 22, ProcBatch: 5, Skew: -442 * time.Millisecond, Procs: []time.Duration{0, 0}},
		{Outage: federation.RegionalOnly, RegionalLimit: 12, Escrow: true, Batch: 18, ProcBatch: 4, Skew: 0, Procs: []time.Duration{0}},
	}}, Cuts: []Cut{
		{From: 12625438187, To: 17726662015, Regions: 0b11},
	}, Steps: []FedStep{
		{At: 16878914566, Region: 0, Proc: 0, Cost: 1},
		{At: 20227053575, Region: 0, Proc: 0, Cost: 1},
		{At: 20250758910, Region: 0, Proc: 0, Cost: 7},
		{At: 20456498408, Region: 0, Proc: 1, Cost: 5},
		{At: 20466285462, Region: 0, Proc: 0, Cost: 7},
		{At: 26669453069, Region: 0, Proc: 0, Cost: 1},
		{At: 26895061114, Region: 1, Proc: 0, Cost: 1},
		{At: 27515277175, Region: 0, Proc: 0, Cost: 1},
		{At: 27618806323, Region: 1, Proc: 0, Cost: 1},
		{At: 27729352629, Region: 1, Proc: 0, Cost: 1},
		{At: 28214135156, Region: 1, Proc: 0, Cost: 1},
		{At: 29097713947, Region: 0, Proc: 0, Cost: 1},
	}},
	// As the checker shrank seed 1281: a coordinator grant at 44.046293679 s
	// parks its surplus in the memory escrow with its time to live counted
	// from the take's instant to the nanosecond (Since) but figured from the
	// grant's Now, which the memory coordinator rounds down to the
	// microsecond: the balance lives 679 ns into window 5, which the cut
	// covers whole, and a fail_closed region admits a unit of window 4
	// there. The Redis escrow rounds Since down to the microsecond and
	// admits nothing. Fails until the memory escrow does the same.
	"memory escrow: a balance outlives its window by under a microsecond": {Seed: 1281, Spec: FedSpec{Limit: 3, ProbeAfter: 1000 * time.Millisecond, Regions: []FedRegion{
		{Outage: federation.FailClosed, Escrow: true, Batch: 3, ProcBatch: 1, Procs: []time.Duration{0}},
	}}, Cuts: []Cut{
		{From: 49467963584, To: 60886389769, Regions: 0b1},
	}, Steps: []FedStep{
		{At: 44046293679, Region: 0, Proc: 0, Cost: 1},
		{At: 50000000324, Region: 0, Proc: 0, Cost: 1},
	}},
}

// TestFederationRegressions replays each federated schedule the checker
// found, judged as the checker judges.
func TestFederationRegressions(t *testing.T) {
	for name, sc := range fedRegressions {
		t.Run(name, func(t *testing.T) {
			r, err := RunFederation(context.Background(), sc, MemoryFederation(), "bc")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range r.Violations {
				t.Errorf("%v", v)
			}
		})
	}
}
