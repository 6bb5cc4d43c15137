package rlqs

// MaxMin splits total units among demands w max-min fairly in whole
// units, as a window's grant is split among streams: every share is
// min(its demand, λ) or λ + 1, for one level λ, the +1s going to the
// lowest indices, each share at most its demand (below 0 is 0), the
// shares adding up to min(total, Σ w). The result is a new slice.
func MaxMin(total int64, w []int64) []int64 {
	var s split
	return append([]int64(nil), s.divide(total, w)...)
}
