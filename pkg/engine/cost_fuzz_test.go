package engine_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// FuzzParseCost: ParseCost never panics, accepts exactly the decimal
// numbers 0..gale.MaxLimit (spaces and tabs around them allowed), and
// reads them as strconv does.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"0", "42", " 7\t", "-1", "+1", "1.5", "1e3", "1099511627776", "1099511627777", "18446744073709551616", "", "0x1f", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := engine.ParseCost(s)
		t1 := strings.Trim(s, " \t")
		ref, rerr := strconv.ParseUint(t1, 10, 64)
		want := rerr == nil && ref <= gale.MaxLimit && !strings.HasPrefix(t1, "+")
		if want != (err == nil) {
			t.Fatalf("ParseCost(%q) = %d, %v; strconv reads %d, %v", s, n, err, ref, rerr)
		}
		if err == nil && uint64(n) != ref {
			t.Fatalf("ParseCost(%q) = %d, strconv %d", s, n, ref)
		}
	})
}

// FuzzCostFromNumber: CostFromNumber never panics and accepts exactly the
// whole numbers 0..gale.MaxLimit.
func FuzzCostFromNumber(f *testing.F) {
	for _, v := range []float64{0, 1, 4000, 0.5, -1, 1 << 40, 1<<40 + 1, math.Inf(1), math.NaN(), math.MaxFloat64, -0.0} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		n, err := engine.CostFromNumber(v)
		want := v >= 0 && v <= gale.MaxLimit && v == math.Trunc(v)
		if want != (err == nil) || (err == nil && float64(n) != v) {
			t.Fatalf("CostFromNumber(%v) = %d, %v", v, n, err)
		}
	})
}
