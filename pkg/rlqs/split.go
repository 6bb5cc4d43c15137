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
	// For divideGroups: the streams by group, each group's demand and
	// share, and the scratch for one group's split.
	byGroup    []int
	segs       []segment
	gw, gshare []int64
	g          []uint64
	inner      *split
}

// groups returns a zeroed scratch slice of n groups.
func (s *split) groups(n int) []uint64 {
	s.g = grow(s.g, n)
	return s.g
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

// divideGroups is divide in two levels: total is split max-min fairly
// among the groups (a group's demand the sum of its members', groups in
// the order of their first stream), then each group's share among its
// members. Streams of one Envoy connection are one group, so a client
// opening many streams is one share of the split, not many (issue 41).
// With every stream its own group it is divide.
func (s *split) divideGroups(total int64, w []int64, group []uint64) []int64 {
	s.byGroup = s.byGroup[:0]
	for i := range w {
		s.byGroup = append(s.byGroup, i)
	}
	// By group, each group's members in index order (a stable sort).
	slices.SortStableFunc(s.byGroup, func(a, b int) int { return cmp.Compare(group[a], group[b]) })
	s.segs = s.segs[:0]
	for k := 0; k < len(s.byGroup); {
		end := k + 1
		for end < len(s.byGroup) && group[s.byGroup[end]] == group[s.byGroup[k]] {
			end++
		}
		s.segs = append(s.segs, segment{k, end})
		k = end
	}
	if len(s.segs) == len(w) {
		return s.divide(total, w)
	}
	// Groups in the order of their first (least-index) stream.
	slices.SortFunc(s.segs, func(a, b segment) int { return cmp.Compare(s.byGroup[a.from], s.byGroup[b.from]) })
	s.gw = s.gw[:0]
	for _, sg := range s.segs {
		var sum int64
		for _, i := range s.byGroup[sg.from:sg.to] {
			sum += max(w[i], 0)
		}
		s.gw = append(s.gw, sum)
	}
	if s.inner == nil {
		s.inner = &split{}
	}
	s.gshare = append(s.gshare[:0], s.inner.divide(total, s.gw)...)
	s.shares = grow(s.shares, len(w))
	for g, sg := range s.segs {
		members := s.byGroup[sg.from:sg.to]
		mw := s.inner.weights(len(members))
		for j, i := range members {
			mw[j] = w[i]
		}
		for j, n := range s.inner.divide(s.gshare[g], mw) {
			s.shares[members[j]] = n
		}
	}
	return s.shares
}

// segment is one group's run in split.byGroup: [from, to).
type segment struct{ from, to int }
