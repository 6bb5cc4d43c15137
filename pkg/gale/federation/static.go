package federation

import (
	"errors"
	"fmt"
)

// Partition splits limit into k static slices, the baseline foil federation
// must beat under skew: limit/k each, the remainder one unit apiece to the
// earliest regions, so the slices sum to limit exactly. Each region then
// enforces its slice alone (a rule whose Limit is its slice): Δ = 0
// trivially, but a hot region binds at its slice while the idle ones strand
// theirs.
func Partition(limit int64, k int) ([]int64, error) {
	if k < 1 {
		return nil, errors.New("federation: a partition needs at least one region")
	}
	if limit < int64(k) {
		return nil, fmt.Errorf("federation: limit %d cannot give each of %d regions a unit", limit, k)
	}
	slices := make([]int64, k)
	q, rem := limit/int64(k), limit%int64(k)
	for i := range slices {
		slices[i] = q
		if int64(i) < rem {
			slices[i]++
		}
	}
	return slices, nil
}
