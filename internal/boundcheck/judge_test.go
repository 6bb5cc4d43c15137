package boundcheck

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestJudge holds the judge to the rows on hand-made histories: what
// clients were told that keeps to a row passes, and one unit more (or a
// denial with room) breaks it, naming the row.
func TestJudge(t *testing.T) {
	const s = time.Second
	ms := time.Millisecond
	window := func(alg string, count int64) Spec {
		return Spec{Mode: Strict, Batch: 1, Limits: []Limit{{Algorithm: counterOf(alg).Algorithm, Period: counterOf(alg).Period, Count: count}}}
	}
	check := func(at time.Duration, node int, cost int64) Step {
		return Step{At: at, Kind: Check, Node: node, Tenant: "t", Cost: cost}
	}
	yes, no := Told{Admitted: true}, Told{}
	leasedGCRA := Spec{Mode: Leased, Batch: 2, Limits: []Limit{{Algorithm: GCRA, Period: s, Count: 1, Burst: 2}}}
	for _, tc := range []struct {
		name  string
		sc    Schedule
		told  []Told
		broke string // the key of the row broken, "" for none
	}{
		{"fixed window at its limit", Schedule{Nodes: 1, Spec: window("fixed", 2), Steps: []Step{check(s, 0, 1), check(2*s, 0, 1), check(3*s, 0, 1)}},
			[]Told{yes, yes, no}, ""},
		{"fixed window one past", Schedule{Nodes: 1, Spec: window("fixed", 2), Steps: []Step{check(s, 0, 1), check(2*s, 0, 1), check(3*s, 0, 1)}},
			[]Told{yes, yes, yes}, rowStrict},
		{"a denial with room", Schedule{Nodes: 1, Spec: window("fixed", 2), Steps: []Step{check(s, 0, 1), check(2*s, 0, 1)}},
			[]Told{yes, no}, rowStrict},
		{"a denial with no room for its cost", Schedule{Nodes: 1, Spec: window("fixed", 2), Steps: []Step{check(s, 0, 1), check(2*s, 0, 2)}},
			[]Told{yes, no}, ""},
		// Sliding: 4 in window 0; at 11 s window 0 still weighs 0.9·4.
		{"sliding window weighs the last window", Schedule{Nodes: 1, Spec: window("sliding", 4), Steps: []Step{check(s, 0, 4), check(11*s, 0, 1), check(17*s, 0, 1)}},
			[]Told{yes, yes, yes}, rowStrict},
		{"sliding window, once the last weighs less", Schedule{Nodes: 1, Spec: window("sliding", 4), Steps: []Step{check(s, 0, 4), check(11*s, 0, 1), check(17*s, 0, 1)}},
			[]Told{yes, no, yes}, ""},
		// GCRA 1/s, burst 2: two at 0, a third whole at 1 s, not before.
		{"gcra at its bound", Schedule{Nodes: 1, Spec: leasedGCRA, Steps: []Step{check(0, 0, 2), check(s, 0, 1)}},
			[]Told{yes, yes}, ""},
		{"gcra a µs early", Schedule{Nodes: 1, Spec: leasedGCRA, Steps: []Step{check(0, 0, 2), check(s-time.Microsecond, 0, 1)}},
			[]Told{yes, yes}, rowBucketLeased},
		{"token bucket denial with room", Schedule{Nodes: 1, Spec: Spec{Mode: Strict, Limits: []Limit{{Algorithm: TokenBucket, Period: s, Count: 1, Burst: 2}}},
			Steps: []Step{check(0, 0, 2), check(1100*ms, 0, 1)}}, []Told{yes, no}, rowBucketStrict},
		// Past an extra, leased nodes admit from the credits they hold:
		// one node, a batch of 2.
		{"leased bucket past an extra by what a node holds", Schedule{Nodes: 1, Spec: leasedGCRA, Steps: []Step{
			{At: 0, Kind: Reserve, Tenant: "t", Cost: 1}, {At: 100 * ms, Kind: Settle, Ref: 0, Cost: 50}, check(200*ms, 0, 1), check(210*ms, 0, 1), check(220*ms, 0, 1)}},
			[]Told{yes, {Admitted: true, Extra: 49}, yes, yes, yes}, ""},
		{"leased bucket past an extra by more", Schedule{Nodes: 1, Spec: leasedGCRA, Steps: []Step{
			{At: 0, Kind: Reserve, Tenant: "t", Cost: 1}, {At: 100 * ms, Kind: Settle, Ref: 0, Cost: 50}, check(200*ms, 0, 1), check(210*ms, 0, 1), check(220*ms, 0, 1), check(230*ms, 0, 1)}},
			[]Told{yes, {Admitted: true, Extra: 49}, yes, yes, yes, yes}, rowBucketLeased},
		// Two limits: the 5 s window is full, the 10 s one is not: due.
		{"a denial due to the other limit", Schedule{Nodes: 1, Spec: Spec{Mode: Strict, Limits: []Limit{{Algorithm: FixedWindow, Period: Window, Count: 5}, {Algorithm: FixedWindow, Period: 5 * s, Count: 1}}},
			Steps: []Step{check(s, 0, 1), check(2*s, 0, 1), check(6*s, 0, 1)}}, []Told{yes, no, yes}, ""},
		{"two limits, one past", Schedule{Nodes: 1, Spec: Spec{Mode: Strict, Limits: []Limit{{Algorithm: FixedWindow, Period: Window, Count: 5}, {Algorithm: FixedWindow, Period: 5 * s, Count: 1}}},
			Steps: []Step{check(s, 0, 1), check(2*s, 0, 1)}}, []Told{yes, yes}, rowSeveral},
		// A restart starts the window's count over, once.
		{"a restart counts again", Schedule{Nodes: 1, Spec: window("fixed", 2), Steps: []Step{check(s, 0, 2), {At: 2 * s, Kind: Restart}, check(3*s, 0, 2)}},
			[]Told{yes, {}, yes}, ""},
		{"a restart counts again, once", Schedule{Nodes: 1, Spec: window("fixed", 2), Steps: []Step{check(s, 0, 2), {At: 2 * s, Kind: Restart}, check(3*s, 0, 2), check(4*s, 0, 1)}},
			[]Told{yes, {}, yes, yes}, rowRestart},
		// Node 1 runs 1 s ahead: its check at 9.5 s is the store's window 1,
		// in which node 0's at 9.8 s (stamped in window 0) is counted too.
		{"skew: a stale stamp counts in the store's window", Schedule{Nodes: 2, Skew: []time.Duration{0, s}, Spec: window("fixed", 1),
			Steps: []Step{check(9500*ms, 1, 1), check(9800*ms, 0, 1)}}, []Told{yes, yes}, rowSkew},
		{"skew: the store's window", Schedule{Nodes: 2, Skew: []time.Duration{0, s}, Spec: window("fixed", 1),
			Steps: []Step{check(9500*ms, 1, 1), check(9800*ms, 0, 1)}}, []Told{yes, no}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := Judge(tc.sc, tc.told)
			switch {
			case tc.broke == "" && len(vs) > 0:
				t.Errorf("broke %v, want no row broken", vs)
			case tc.broke != "" && (len(vs) == 0 || vs[0].Row != Rows[tc.broke].Name):
				t.Errorf("broke %v, want %q", vs, Rows[tc.broke].Name)
			}
		})
	}
}

// counterOf names the counters TestJudge uses.
func counterOf(name string) Counter {
	return map[string]Counter{"fixed": {FixedWindow, Window}, "sliding": {SlidingWindow, Window}}[name]
}

// TestReplayIsExact: a schedule played twice on the memory store is told
// the same at every step.
func TestReplayIsExact(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		sc := Generate(seed)
		a, err := Play(context.Background(), sc, memory, "bc")
		if err != nil {
			t.Fatal(err)
		}
		b, err := Play(context.Background(), sc, memory, "bc")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d told differently when played again", seed)
		}
	}
}
