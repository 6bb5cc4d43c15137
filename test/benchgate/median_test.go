package benchgate

import (
	"slices"
	"testing"
)

// The table's rows are each setup's median round by goodput, with the
// rounds' range, and a fleet's ratio to one sidecar taken round by round.
func TestMedianRows(t *testing.T) {
	one, four := setup{name: "aimd", sidecars: 1, gate: "g"}, setup{name: "aimd", sidecars: 4, gate: "g"}
	rounds := [][]result{
		{{setup: one, goodput: 0.90, inflight: 1}, {setup: four, goodput: 0.45, inflight: 1}},
		{{setup: one, goodput: 0.80, inflight: 2}, {setup: four, goodput: 0.80, inflight: 2}},
		{{setup: one, goodput: 0.70, inflight: 3}, {setup: four, goodput: 0.63, inflight: 3}},
	}
	rows := medianRows(rounds)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	if r := rows[0]; r.goodput != 0.80 || r.inflight != 2 || r.spread != [2]float64{0.70, 0.90} || r.ratios != nil {
		t.Fatalf("one sidecar: %+v, want round 2's row, range 0.70–0.90, no ratios", r)
	}
	if r := rows[1]; r.goodput != 0.63 || r.inflight != 3 || r.spread != [2]float64{0.45, 0.80} ||
		!slices.Equal(r.ratios, []float64{0.5, 1, 0.9}) {
		t.Fatalf("fleet: %+v, want round 3's row, range 0.45–0.80, ratios 0.5, 1, 0.9", r)
	}
	if medianRows(nil) != nil {
		t.Fatal("no rounds: want no rows")
	}
}
