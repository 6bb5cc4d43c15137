package rlqs

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveDivide is max-min fairness in whole units the slow, obvious way:
// one unit at a time to the stream with the least so far among those below
// their demand, ties to the lower index.
func naiveDivide(total int64, w []int64) []int64 {
	out := make([]int64, len(w))
	for ; total > 0; total-- {
		best := -1
		for i, x := range w {
			if out[i] < x && (best < 0 || out[i] < out[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out[best]++
	}
	return out
}

func TestDivideMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s split
	for range 20000 {
		n := 1 + r.IntN(7)
		w := make([]int64, n)
		for i := range w {
			w[i] = r.Int64N(12) - 1 // some 0 and −1: no demand
		}
		total := r.Int64N(40)
		got := s.divide(total, w)
		want := naiveDivide(total, w)
		if !slices.Equal(got, want) {
			t.Fatalf("divide(%d, %v) = %v, want %v", total, w, got, want)
		}
		var sum, wsum int64
		for i, x := range got {
			if x < 0 || x > max(w[i], 0) {
				t.Fatalf("divide(%d, %v): share %d of weight %d", total, w, x, w[i])
			}
			sum += x
			wsum += max(w[i], 0)
		}
		if sum != min(total, wsum) {
			t.Fatalf("divide(%d, %v) adds to %d", total, w, sum)
		}
	}
	// Large demands.
	got := s.divide(1<<40, []int64{1 << 40, 1<<40 + 1, 3})
	if got[0]+got[1]+got[2] != 1<<40 || got[2] != 3 || got[0]-got[1] > 1 || got[1]-got[0] > 1 {
		t.Fatalf("large: %v", got)
	}
}

// TestAGreedyDemandTakesOnlyWhatIsLeft (issue 41, item 4): one stream
// reporting the most a report may carry does not take the honest streams'
// units. In proportion to demand it took all 400 and left them 0.
func TestAGreedyDemandTakesOnlyWhatIsLeft(t *testing.T) {
	var s split
	got := s.divide(400, []int64{MaxReportCount, 45, 45, 45})
	if !slices.Equal(got, []int64{265, 45, 45, 45}) {
		t.Fatalf("divide(400, [2^50, 45, 45, 45]) = %v, want the honest 45 each and the rest to the greedy one", got)
	}
	got = s.divide(100, []int64{MaxReportCount, 45, 45, 45})
	if !slices.Equal(got, []int64{25, 25, 25, 25}) {
		t.Fatalf("divide(100, [2^50, 45, 45, 45]) = %v, want 25 each: the fair share", got)
	}
}

// TestDivideGroupsMatchesNaive: the two-level split against naiveDivide
// over the groups' summed demands, then within each group; one group per
// stream is divide itself.
func TestDivideGroupsMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var s split
	for range 20000 {
		n := 1 + r.IntN(7)
		w, g := make([]int64, n), make([]uint64, n)
		for i := range w {
			w[i] = r.Int64N(12) - 1
			g[i] = uint64(r.IntN(3))
		}
		total := r.Int64N(40)
		got := slices.Clone(s.divideGroups(total, w, g))
		sums := map[uint64]int64{}
		var order []uint64 // groups in the order of their first stream
		for i, x := range w {
			if _, ok := sums[g[i]]; !ok {
				order = append(order, g[i])
			}
			sums[g[i]] += max(x, 0)
		}
		gw := make([]int64, len(order))
		for k, id := range order {
			gw[k] = sums[id]
		}
		gshare := naiveDivide(total, gw)
		want := make([]int64, n)
		for k, id := range order {
			var members []int
			var mw []int64
			for i := range w {
				if g[i] == id {
					members = append(members, i)
					mw = append(mw, w[i])
				}
			}
			for j, x := range naiveDivide(gshare[k], mw) {
				want[members[j]] = x
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("divideGroups(%d, %v, %v) = %v, want %v", total, w, g, got, want)
		}
	}
	// 16 greedy streams of one connection and three honest Envoys: the
	// honest get their demand, the greedy connection what they leave.
	w := append(slices.Repeat([]int64{MaxReportCount}, 16), 12, 12, 12)
	g := append(slices.Repeat([]uint64{99}, 16), 1, 2, 3)
	got := s.divideGroups(100, w, g)
	if got[16] != 12 || got[17] != 12 || got[18] != 12 {
		t.Fatalf("honest shares %v, want 12 each", got[16:])
	}
}
