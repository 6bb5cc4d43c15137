package model

import (
	"fmt"
	"testing"
)

// The trilemma of seed 04: any zero-coordination protocol has worst-case
// overshoot Δ and under-utilisation U with Δ + N·U ≥ (N−1)·L, with equality
// at the uniform allocation.
//
// The protocol class. A zero-coordination protocol pre-authorises node i to
// admit a_i ≥ 0 units (an integer) of a window's budget L and never talks to
// another node. Under a demand vector d (d_i ≥ 0 requests reach node i) node
// i admits min(d_i, a_i), so the fleet admits
//
//	admitted(a, d) = Σ_i min(d_i, a_i).
//
// The two worst cases, over all demand vectors d:
//
//	Δ(a) = max_d max(0, admitted(a, d) − L)        overshoot above the limit
//	U(a) = max_d (min(Σ_i d_i, L) − admitted(a, d)) demand an exact global
//	                                                limiter would admit and a refuses
//
// U ≥ 0 (d = 0 gives 0). Demands d_i ≤ max(L, a_i) cover both maxima: for Δ
// the worst is d = a; for U, lowering a d_i > L to L leaves min(Σd, L) = L
// and admits no more. Allocations run over a_i ∈ 0..L+1, one above the limit
// to include nodes authorised beyond it.
//
// Closed forms, which the test checks against the enumeration:
// Δ = max(0, Σa − L) and U = L − min(L, min_i a_i) (all demand on the least
// authorised node). Then Δ + N·U ≥ (Σa − L) + N·L − N·min a ≥ (N−1)·L, since
// Σa ≥ N·min a. Both steps are equalities for every uniform allocation
// a_i = c with L/N ≤ c ≤ L, so the bound is attained for every L; a_i = L/N
// (when N divides L) is the one of them with Δ = 0.

// worstCases returns Δ(a) and U(a) by enumerating every demand vector with
// d_i ∈ 0..max(L, a_i).
func worstCases(a []int, limit int) (overshoot, under int) {
	n := len(a)
	d := make([]int, n)
	for {
		total, admitted := 0, 0
		for i := range n {
			total += d[i]
			admitted += min(d[i], a[i])
		}
		overshoot = max(overshoot, admitted-limit)
		under = max(under, min(total, limit)-admitted)
		// Next demand vector, as an odometer.
		i := 0
		for ; i < n; i++ {
			if d[i] < max(limit, a[i]) {
				d[i]++
				break
			}
			d[i] = 0
		}
		if i == n {
			return overshoot, under
		}
	}
}

func TestTrilemma(t *testing.T) {
	for _, tc := range []struct{ nodes, maxLimit int }{{2, 8}, {3, 6}, {4, 5}} {
		for limit := 1; limit <= tc.maxLimit; limit++ {
			t.Run(fmt.Sprintf("N=%d/L=%d", tc.nodes, limit), func(t *testing.T) {
				n := tc.nodes
				bound := (n - 1) * limit
				best := -1 // the least Δ + N·U over all allocations
				a := make([]int, n)
				for {
					overshoot, under := worstCases(a, limit)
					sum, least := 0, a[0]
					for _, x := range a {
						sum += x
						least = min(least, x)
					}
					if overshoot != max(0, sum-limit) || under != limit-min(limit, least) {
						t.Fatalf("a=%v: enumerated Δ=%d U=%d, closed forms %d and %d", a, overshoot, under, max(0, sum-limit), limit-min(limit, least))
					}
					v := overshoot + n*under
					if v < bound {
						t.Fatalf("a=%v: Δ + N·U = %d + %d·%d = %d < (N−1)·L = %d", a, overshoot, n, under, v, bound)
					}
					if best < 0 || v < best {
						best = v
					}
					uniform := limit%n == 0
					for _, x := range a {
						uniform = uniform && x == limit/n
					}
					if uniform && v != bound {
						t.Fatalf("uniform a=%v: Δ + N·U = %d, want equality at %d", a, v, bound)
					}
					i := 0
					for ; i < n; i++ {
						if a[i] <= limit {
							a[i]++
							break
						}
						a[i] = 0
					}
					if i == n {
						break
					}
				}
				// The bound is tight for every L, not only where N divides
				// it: some allocation attains it.
				if best != bound {
					t.Fatalf("least Δ + N·U over all allocations is %d, want (N−1)·L = %d", best, bound)
				}
			})
		}
	}
}
