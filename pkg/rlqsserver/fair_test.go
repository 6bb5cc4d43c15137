package rlqsserver

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// TestFairShareOfIsMaxMin: every member's share is at most its demand; the
// shares add up to min(total, Σ demands); a member short of its demand
// gets at least as much as any other member (max-min); and every member
// computes its share from the same demands alike, whatever their order.
func TestFairShareOfIsMaxMin(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 9))
	for n := range 2000 {
		var ds []ratelimit.QuotaDemand
		for m := range 1 + rng.IntN(6) {
			ds = append(ds, ratelimit.QuotaDemand{Member: fmt.Sprintf("m%d", m), Units: rng.Int64N(60)})
		}
		total := rng.Int64N(200)
		var sum, dsum int64
		shares := map[string]int64{}
		for _, d := range ds {
			perm := append([]ratelimit.QuotaDemand(nil), ds...)
			rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
			s := fairShareOf(total, perm, d.Member)
			if s2 := fairShareOf(total, ds, d.Member); s != s2 {
				t.Fatalf("case %d: %s's share %d in one order, %d in another", n, d.Member, s, s2)
			}
			if s < 0 || s > d.Units {
				t.Fatalf("case %d: %s gets %d of its demand %d", n, d.Member, s, d.Units)
			}
			shares[d.Member] = s
			sum += s
			dsum += d.Units
		}
		if sum != min(total, dsum) {
			t.Fatalf("case %d: total %d, demands %v: shares %v add up to %d, want %d", n, total, ds, shares, sum, min(total, dsum))
		}
		for _, a := range ds {
			for _, b := range ds {
				if shares[a.Member] < a.Units && shares[b.Member] > shares[a.Member]+1 {
					t.Fatalf("case %d: %s short of its demand with %d while %s gets %d: %v", n, a.Member, shares[a.Member], b.Member, shares[b.Member], ds)
				}
			}
		}
	}
	if got := fairShareOf(10, []ratelimit.QuotaDemand{{Member: "a", Units: 5}}, "b"); got != 0 {
		t.Errorf("a member not among the demands gets %d", got)
	}
}
