package rlqs

import (
	"math/bits"
	"slices"
)

// split is scratch for divide, reused across landings so that a bucket's
// splits allocate only when it has more streams than ever before.
//
// Why not pkg/gale/fair or the fleet gate's targetOf: fair's WaterFill is
// max-min fairness over float64 demands and allocates its result; targetOf
// floors each share (what it leaves is never handed out) and gives every
// node one slot first. Here the whole grant is handed out, in proportion
// to demand, in whole units.
type split struct {
	w, shares []int64
	rem       []uint64
	order     []int
}

// weights returns a zeroed scratch slice of n weights.
func (s *split) weights(n int) []int64 {
	s.w = grow(s.w, n)
	return s.w
}

func grow[T any](x []T, n int) []T {
	if cap(x) < n {
		return make([]T, n)
	}
	x = x[:n]
	clear(x)
	return x
}

// divide splits total units by weights w (each ≥ 0) in proportion, rounding
// by largest remainder (ties to the lower index): each share is at most its
// weight, and the shares add up to min(total, Σ w). The result is scratch.
func (s *split) divide(total int64, w []int64) []int64 {
	s.shares = grow(s.shares, len(w))
	var sum int64
	for _, x := range w {
		sum += max(x, 0)
	}
	if sum <= 0 || total <= 0 {
		return s.shares
	}
	if total >= sum {
		for i, x := range w {
			s.shares[i] = max(x, 0)
		}
		return s.shares
	}
	s.rem = grow(s.rem, len(w))
	s.order = s.order[:0]
	given := int64(0)
	for i, x := range w {
		if x <= 0 {
			continue
		}
		// total·x/sum in 128 bits: total, x ≤ sum < 2^63, and the quotient
		// is below total.
		hi, lo := bits.Mul64(uint64(total), uint64(x))
		q, r := bits.Div64(hi, lo, uint64(sum))
		s.shares[i], s.rem[i] = int64(q), r
		given += int64(q)
		s.order = append(s.order, i)
	}
	slices.SortStableFunc(s.order, func(a, b int) int {
		switch {
		case s.rem[a] > s.rem[b]:
			return -1
		case s.rem[a] < s.rem[b]:
			return 1
		}
		return 0
	})
	for _, i := range s.order[:total-given] {
		s.shares[i]++
	}
	return s.shares
}
