package rlqs

import (
	"cmp"
	"slices"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// FairShare is member own's max-min fair share of total units among
// demands (own's among them, by name; a member named twice counts once,
// its first entry): each member gets min(its demand, λ) or λ + 1, for one
// level λ, the +1s going to the smallest names. Members that see the same
// demands compute shares that add up to min(total, Σ demands). 0 when own
// is not among them. It does not change demands.
//
// A window's L is shared among the sidecars leasing one counter by their
// Envoys' demand (gale.DemandLedger): first come, a sidecar whose Envoys'
// demand covered L took the whole window every window, and the other
// sidecars' Envoys got nothing (issue 41, item 9).
func FairShare(total int64, demands []gale.Demand, own string) int64 {
	d := slices.Clone(demands)
	slices.SortStableFunc(d, func(a, b gale.Demand) int { return cmp.Compare(a.Member, b.Member) })
	d = slices.CompactFunc(d, func(a, b gale.Demand) bool { return a.Member == b.Member })
	i := slices.IndexFunc(d, func(x gale.Demand) bool { return x.Member == own })
	if i < 0 || total <= 0 {
		return 0
	}
	mine := max(d[i].Units, 0)
	slices.SortStableFunc(d, func(a, b gale.Demand) int { return cmp.Compare(a.Units, b.Units) })
	left, k := total, int64(len(d))
	j := 0
	for ; j < len(d); j++ {
		if x := max(d[j].Units, 0); x <= left/k {
			left -= x
			k--
			continue
		}
		break
	}
	if j == len(d) || mine <= left/k && slices.IndexFunc(d[:j], func(x gale.Demand) bool { return x.Member == own }) >= 0 {
		return mine // every demand met, or own's among those met
	}
	level, extra := left/k, left%k
	rest := d[j:]
	slices.SortFunc(rest, func(a, b gale.Demand) int { return cmp.Compare(a.Member, b.Member) })
	if int64(slices.IndexFunc(rest, func(x gale.Demand) bool { return x.Member == own })) < extra {
		return level + 1
	}
	return level
}
