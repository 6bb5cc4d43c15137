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
