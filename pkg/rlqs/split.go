package rlqs

import (
	"cmp"
	"slices"
)

// split is scratch for divide, reused across landings so that a bucket's
// splits allocate only when it has more streams than ever before.
//
// Why not pkg/gale/fair's WaterFill: it is max-min fairness over float64
// demands and allocates its result. Here the same split is made in whole
// units, the whole grant handed out.
type split struct {
	w, shares []int64
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

// divide splits total units among demands w (each ≥ 0; below 0 is 0)
// max-min fairly, in whole units: every share is min(its demand, λ) or
// λ + 1, for one level λ, the +1s going to the lowest indices; each share
// is at most its demand, and the shares add up to min(total, Σ w). A
// demand far above the others' cannot take their units: it gets what
// they leave (issue 41: split in proportion to demand, one stream
// reporting 2⁴⁰ − 1 denied took all of L every window). The result is
// scratch.
func (s *split) divide(total int64, w []int64) []int64 {
	s.shares = grow(s.shares, len(w))
	s.order = s.order[:0]
	for i, x := range w {
		if x > 0 {
			s.order = append(s.order, i)
		}
	}
	if len(s.order) == 0 || total <= 0 {
		return s.shares
	}
	slices.SortStableFunc(s.order, func(a, b int) int { return cmp.Compare(w[a], w[b]) })
	left, k := total, int64(len(s.order))
	j := 0
	for ; j < len(s.order); j++ {
		i := s.order[j]
		if w[i] > left/k {
			break // it and every larger demand share what is left
		}
		s.shares[i] = w[i]
		left -= w[i]
		k--
	}
	if j == len(s.order) {
		return s.shares // every demand met
	}
	rest := s.order[j:]
	level, extra := left/k, left%k
	slices.Sort(rest) // the +1s go to the lowest indices
	for n, i := range rest {
		s.shares[i] = level
		if int64(n) < extra {
			s.shares[i]++
		}
	}
	return s.shares
}
