package rlqs

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
)

// naiveDivide is largest-remainder rounding the slow, obvious way: exact
// quotas in rationals, floors, then one unit each to the largest
// remainders, ties to the lower index.
func naiveDivide(total int64, w []int64) []int64 {
	out := make([]int64, len(w))
	var sum int64
	for _, x := range w {
		sum += max(x, 0)
	}
	if sum == 0 || total <= 0 {
		return out
	}
	if total >= sum {
		for i, x := range w {
			out[i] = max(x, 0)
		}
		return out
	}
	rem := make([]*big.Rat, len(w))
	left := total
	for i, x := range w {
		q := new(big.Rat).SetFrac(big.NewInt(total*max(x, 0)), big.NewInt(sum))
		f := new(big.Int).Quo(q.Num(), q.Denom())
		out[i] = f.Int64()
		left -= out[i]
		rem[i] = new(big.Rat).Sub(q, new(big.Rat).SetInt(f))
	}
	idx := make([]int, len(w))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return -rem[a].Cmp(rem[b]) })
	for _, i := range idx[:left] {
		out[i]++
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
	// Large weights: the 128-bit product.
	got := s.divide(1<<40, []int64{1 << 40, 1<<40 + 1, 3})
	if got[0]+got[1]+got[2] != 1<<40 || got[1] < got[0] {
		t.Fatalf("large: %v", got)
	}
}
