package distributed

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestBeatPropertiesOnRandomFleets drives Beat over random fleets — joins,
// restarts, crashes (a node that stops beating), slow beats, stale and
// out-of-order reports, acknowledgements that lag — and checks after every
// step:
//   - with every node's local limit the same (L_global constant), Σ share of
//     the live records ≤ L_global;
//   - whatever the local limits, a beat never adds over-commitment: Σ share
//     after ≤ max(L_global, Σ share before over the records that survive);
//   - the grant is the reporter's record, and no share is negative.
func TestBeatPropertiesOnRandomFleets(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 5))
		constant := seed%2 == 0
		cfg := Config{LeaseTTL: time.Duration(1+r.IntN(3)) * time.Second, Aggregate: Aggregate(r.IntN(3)),
			Split: Split(r.IntN(2)), Handoff: r.IntN(2) == 0}
		var recs []Record
		seq := map[string]uint64{}
		gen := map[string]uint64{}
		now := int64(1_700_000_000_000_000)
		for step := range 400 {
			now += int64(r.IntN(1200)) * 1000
			node := fmt.Sprintf("n%d", r.IntN(6))
			local := 12
			if !constant {
				local = 1 + r.IntN(20)
			}
			seq[node]++
			rep := Report{Node: node, Instance: "i", Seq: seq[node], Local: local, Inflight: r.IntN(8), Demand: r.IntN(20), AppliedGen: gen[node]}
			if seq[node] > 1 && r.IntN(8) == 0 {
				rep.Seq = seq[node] - 1 // an out-of-order report
			}
			before := 0
			for _, rec := range recs {
				if rec.ExpiresAt > now || rec.Node == node {
					before += rec.Share
				}
			}
			next, g, err := Beat(recs, rep, cfg, now)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if g.Status == Granted && r.IntN(4) != 0 {
				gen[node] = g.Gen // the reply arrived and was applied (or lost: 1 in 4)
			}
			sum := 0
			for _, rec := range next {
				if rec.Share < 0 {
					t.Fatalf("seed %d step %d: negative share %+v", seed, step, rec)
				}
				sum += rec.Share
				if rec.Node == node && g.Status == Granted && (rec.Share != g.Share || rec.Gen != g.Gen) {
					t.Fatalf("seed %d step %d: grant %+v, record %+v", seed, step, g, rec)
				}
			}
			if g.Status != Granted {
				continue
			}
			if constant && sum > g.Global {
				t.Fatalf("seed %d step %d: Σ share %d > L_global %d: %+v", seed, step, sum, g.Global, next)
			}
			if sum > max(g.Global, before) {
				t.Fatalf("seed %d step %d: Σ share %d after the beat > max(L_global %d, Σ before %d)", seed, step, sum, g.Global, before)
			}
			recs = next
		}
	}
}

// TestBeatDoesNotModifyItsInput: a coordinator that fails to store the
// result keeps the records it had.
func TestBeatDoesNotModifyItsInput(t *testing.T) {
	cfg := Config{LeaseTTL: time.Second}
	recs, _, err := Beat(nil, Report{Node: "a", Instance: "i", Seq: 1, Local: 4}, cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := append([]Record(nil), recs...)
	if _, _, err := Beat(recs, Report{Node: "a", Instance: "i", Seq: 2, Local: 9, AppliedGen: 1}, cfg, 2); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(recs) != fmt.Sprint(snapshot) {
		t.Fatalf("Beat changed its input: %+v, was %+v", recs, snapshot)
	}
}

func BenchmarkBeat(b *testing.B) {
	for _, n := range []int{4, 32} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			cfg := Config{LeaseTTL: time.Hour, Handoff: true}
			var recs []Record
			for i := range n {
				recs, _, _ = Beat(recs, Report{Node: fmt.Sprintf("n%02d", i), Instance: "i", Seq: 1, Local: 100}, cfg, 1)
			}
			b.ReportAllocs()
			seq := uint64(1)
			for b.Loop() {
				seq++
				recs, _, _ = Beat(recs, Report{Node: "n00", Instance: "i", Seq: seq, Local: 100, AppliedGen: seq - 1}, cfg, 2)
			}
		})
	}
}

// TestEqualSplitRotatesTheRemainder: with L_global below the number of
// nodes, Equal's ⌊L/N⌋ is 0 and only the remainder's nodes get a slot. Were
// it always the same ones, a node left without would admit nothing,
// measure nothing, and, holding the lowest L_local, keep the fleet there
// for good. Every node must be granted a slot within a few leases.
func TestEqualSplitRotatesTheRemainder(t *testing.T) {
	for _, handoff := range []bool{false, true} {
		cfg := Config{LeaseTTL: 400 * time.Millisecond, Handoff: handoff}
		nodes := []string{"a", "b", "c", "d"}
		local := map[string]int{"a": 3, "b": 3, "c": 3, "d": 2} // d holds the lowest: L_global 2
		var recs []Record
		seq, gen := map[string]uint64{}, map[string]uint64{}
		got := map[string]bool{}
		now := int64(1_700_000_000_000_000)
		// Each node beats every 200ms (half a lease) for 8 leases, echoing
		// what it was granted.
		for step := range 64 {
			node := nodes[step%len(nodes)]
			seq[node]++
			var g Grant
			var err error
			recs, g, err = Beat(recs, Report{Node: node, Instance: "i", Seq: seq[node], Local: local[node], AppliedGen: gen[node]}, cfg, now)
			if err != nil {
				t.Fatal(err)
			}
			gen[node] = g.Gen
			if g.Global != 2 && step >= len(nodes) {
				t.Fatalf("step %d: global %d, want 2", step, g.Global)
			}
			if g.Share > 0 {
				got[node] = true
			}
			now += 50_000
		}
		for _, n := range nodes {
			if !got[n] {
				t.Errorf("handoff %v: node %s never granted a slot of L_global 2 over 8 leases (granted: %v)", handoff, n, got)
			}
		}
	}
}
