package policy_test

import (
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// TestLimitsSharingACounterAreRefused: two limits of one descriptor that
// count per the same period (unit × unit_multiplier) with the same
// algorithm would share a counter, whatever their names and figures: the
// second is refused at its line and field. Limits that count nothing
// (unlimited, requests_per_unit 0), another period or another algorithm
// are not.
func TestLimitsSharingACounterAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, limits string
		want         string // "" = loads
	}{
		{"same unit, other names and figures", "{name: a, unit: second, requests_per_unit: 10}, {name: b, unit: second, requests_per_unit: 20}",
			"f.yaml:4: descriptors[0].rate_limits[1]: counts the same requests as the limit at line 4: both count per second with fixed_window"},
		{"a minute is 60 seconds", "{unit: minute, requests_per_unit: 10}, {unit: second, unit_multiplier: 60, requests_per_unit: 20}",
			"both count per minute with fixed_window"},
		{"two gcra rates per second", "{unit: second, requests_per_unit: 10, algorithm: gcra, burst: 50}, {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 5}",
			"a second gcra rate can be written per another unit"},
		{"gcra rates per second and per minute", "{unit: second, requests_per_unit: 100, algorithm: gcra, burst: 5}, {unit: minute, requests_per_unit: 600, algorithm: gcra, burst: 50}", ""},
		{"another algorithm", "{unit: second, requests_per_unit: 10}, {unit: second, requests_per_unit: 20, algorithm: sliding_window}", ""},
		{"another multiplier", "{unit: second, requests_per_unit: 10}, {unit: second, unit_multiplier: 2, requests_per_unit: 20}", ""},
		{"blocked and unlimited count nothing", "{unit: second, requests_per_unit: 10}, {unit: second, requests_per_unit: 0}, {unlimited: true}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "domain: d\ndescriptors:\n  - key: k\n    rate_limits: [" + tc.limits + "]\n"
			_, err := policy.Parse("f.yaml", []byte(src))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
