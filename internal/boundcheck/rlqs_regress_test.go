package boundcheck

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// rlqsRegressions are RLQS schedules the checker found breaking the table,
// shrunk, kept so that what broke stays fixed.
var rlqsRegressions = map[string]RLQSSchedule{
	// Issue 40, item 3, as the checker shrank seed 8 on the main before
	// a2c6716 (the first seed of the survey to break): one Envoy subscribes
	// at 47.8 s (its sidecar leases the window's prior), the limit is cut
	// to 0 at 47.9 s, and no report comes before the window's end: the
	// bucket's timer leased the window at 50 s under the limit it had
	// captured and assigned 8 tokens where DENY_ALL was due.
	"cut to 0 before the window's timer": {Seed: 8, Policy: RLQSPolicy{Limit: 63, Window: 10 * time.Second, Sliding: false, Name: "l0"}, Servers: 1, Envoys: []int{0}, Full: true, Steady: false, Length: 60 * time.Second, Steps: []RLQSStep{
		{At: 47833840051, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 47948569968, Kind: RLQSReload, Policy: RLQSPolicy{Limit: 0, Window: 10 * time.Second, Sliding: false, Name: "l0"}},
	}},
	// Issue 40, item 3 as the issue tells it, as the checker shrank seed 19
	// on the same main: the Envoy's last report of the window is at 6.45 s
	// (one request in 5 s), the limit per 10 s is cut from 57 to 1 at
	// 9.64 s, and the window at 10 s was assigned 2 tokens from its timer,
	// the old limit's lease.
	"cut after the window's last report": {Seed: 19, Policy: RLQSPolicy{Limit: 57, Window: 10 * time.Second, Sliding: true, Name: "l0"}, Servers: 1, Envoys: []int{0}, Full: false, Steady: false, Length: 20 * time.Second, Steps: []RLQSStep{
		{At: 1454596990, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 1815300743, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 9643510331, Kind: RLQSReload, Policy: RLQSPolicy{Limit: 1, Window: 10 * time.Second, Sliding: true, Name: "l0"}},
	}},
	// Issue 40, item 3, a moved counter, as the checker shrank seed 230
	// on the same main: the limit moves from a fixed to a sliding 10 s
	// window (another counter) at 8.7 s, with no report before the
	// window's end; the timer at 10 s leased the old counter under its
	// old limit (6 tokens), the next report (10.7 s) and a new Envoy
	// (11.6 s) the new one (29 and 26): 61 in the window where the new
	// counter allows 58.
	"counter moved before the window's timer": {Seed: 230, Policy: RLQSPolicy{Limit: 50, Window: 10 * time.Second, Sliding: false, Name: "l0"}, Servers: 1, Envoys: []int{0, 0}, Full: true, Steady: false, Length: 20 * time.Second, Steps: []RLQSStep{
		{At: 5690516680, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 5876532499, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 5930285918, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 5937325330, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 5973333006, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 6074260972, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8063131205, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8095113667, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8095983619, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8158839850, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8412715422, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8463878453, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8700608795, Kind: RLQSReload, Policy: RLQSPolicy{Limit: 58, Window: 10 * time.Second, Sliding: true, Name: "l0"}},
		{At: 8767915720, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8867998349, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 9306081237, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 9327922396, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 9819316053, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 11635915999, Kind: RLQSRequest, Envoy: 1, Bucket: 0},
	}},
	// Issue 41, ALLOW_ALL, as the checker shrank seed 1 on the main before
	// the seal: one Envoy under Envoy's default no_assignment_behavior
	// subscribes at 6.9 s and is assigned 2 tokens for ⌊3.1 − 0.25⌋ = 2 s;
	// they run out at 8.9 s, before the window's end, and its request at
	// 9.0 s was admitted unmetered (4 admitted, 2 assigned, 1 first).
	"allow_all: an assignment expiring before its window's end": {Seed: 1, Policy: RLQSPolicy{Limit: 70, Window: 10 * time.Second, Sliding: false, Name: "l0"}, Servers: 1, Envoys: []int{0}, Full: true, AllowAll: true, Steady: true, Length: 10 * time.Second, Steps: []RLQSStep{
		{At: 6906660791, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 7008145608, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 8392366762, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 9034050187, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
	}},
	// Issue 41, ALLOW_ALL: seed 408 with the seal, before a cut to 0 told
	// every stream: the cut at 9.3 s is noticed at 10 s by Envoy 0's
	// subscription, which alone was told DENY_ALL; Envoy 1's seal ran out
	// at 11.5 s and its request then was admitted unmetered (the window's
	// timer found the bucket resolved already).
	"allow_all, cut to 0 after a seal": {Seed: 408, Policy: RLQSPolicy{Limit: 56, Window: 5 * time.Second, Sliding: false, Name: "l0"}, Servers: 1, Envoys: []int{0, 0}, Full: false, AllowAll: true, Steady: false, Length: 15 * time.Second, Steps: []RLQSStep{
		{At: 3576333751, Kind: RLQSRequest, Envoy: 1, Bucket: 0},
		{At: 9317586161, Kind: RLQSReload, Policy: RLQSPolicy{Limit: 0, Window: 5 * time.Second, Sliding: false, Name: "l1"}},
		{At: 10000000000, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 11505045945, Kind: RLQSRequest, Envoy: 1, Bucket: 0},
	}},
	// Issue 41, item 9, seed 3069: at 10 s sidecar 0 waits for sidecar 1,
	// which leased in the window before (the demand ledger), and asks
	// nothing in this one; by the end of the wait its own Envoy has
	// reported a demand of 0, so nothing is leased. The table first
	// counted only reports heard at the window's start.
	"ledger: a sidecar of the window before asks nothing in this one": {Seed: 3069, Policy: RLQSPolicy{Limit: 12, Window: 10 * time.Second, Sliding: false, Name: "l0"}, Servers: 2, Envoys: []int{1, 0}, Full: false, AllowAll: false, Steady: true, Length: 20 * time.Second, Steps: []RLQSStep{
		{At: 2884529745, Kind: RLQSRequest, Envoy: 0, Bucket: 1},
		{At: 5161920048, Kind: RLQSRequest, Envoy: 1, Bucket: 1},
	}},
	// Issue 41, item 9, seed 3750 (L 1, Envoys on sidecars 1 and 2): at
	// 20 s sidecar 1 announced a demand of 1 and then, its Envoy's demand
	// known to be 0 by the end of the ledger's wait, leased nothing; its
	// announced share kept sidecar 2 from the window's one unit. A
	// sidecar refused by its share now asks again a second later, first
	// come.
	"ledger: a share announced and never taken": {Seed: 3750, Policy: RLQSPolicy{Limit: 1, Window: 10 * time.Second, Sliding: false, Name: "l0"}, Servers: 3, Envoys: []int{1, 2}, Full: true, AllowAll: true, Steady: true, Length: 30 * time.Second, Steps: []RLQSStep{
		{At: 15427311082, Kind: RLQSRequest, Envoy: 0, Bucket: 0},
		{At: 16415687507, Kind: RLQSRequest, Envoy: 1, Bucket: 0},
	}},
}

// TestRLQSRegressions replays each RLQS schedule the checker found,
// judged by the table as the checker judges.
func TestRLQSRegressions(t *testing.T) {
	for name, sc := range rlqsRegressions {
		t.Run(name, func(t *testing.T) {
			r, err := RunRLQS(context.Background(), sc, func() gale.Store { return memstore.New() }, "bcq")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range r.Violations {
				t.Errorf("%v", v.Violation)
			}
			if t.Failed() {
				for _, a := range r.Told.Actions {
					t.Logf("%+v", a)
				}
			}
		})
	}
}
