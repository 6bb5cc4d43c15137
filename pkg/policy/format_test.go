package policy_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// withoutPlaces zeroes what Format does not keep (where each thing was
// written), so that two domains can be compared for meaning.
func withoutPlaces(d *policy.Domain) *policy.Domain {
	c := *d
	c.File = ""
	var descs func([]*policy.Descriptor) []*policy.Descriptor
	descs = func(in []*policy.Descriptor) []*policy.Descriptor {
		var out []*policy.Descriptor
		for _, pd := range in {
			x := *pd
			x.Pos = policy.Pos{}
			x.Limits = nil
			for _, l := range pd.Limits {
				y := *l
				y.Pos, y.Field = policy.Pos{}, ""
				x.Limits = append(x.Limits, &y)
			}
			if pd.Fairness != nil {
				f := *pd.Fairness
				f.Pos = policy.Pos{}
				x.Fairness = &f
			}
			x.Descriptors = descs(pd.Descriptors)
			out = append(out, &x)
		}
		return out
	}
	c.Descriptors = descs(d.Descriptors)
	c.Gates = nil
	for _, g := range d.Gates {
		x := *g
		x.Pos, x.Field = policy.Pos{}, ""
		x.Params = nil
		for k, p := range g.Params {
			if x.Params == nil {
				x.Params = map[string]policy.Param{}
			}
			x.Params[k] = policy.Param{Value: p.Value}
		}
		c.Gates = append(c.Gates, &x)
	}
	c.Costs = nil
	for _, cl := range d.Costs {
		x := *cl
		x.Pos, x.Field = policy.Pos{}, ""
		c.Costs = append(c.Costs, &x)
	}
	return &c
}

// roundTrip formats d, parses the result, and checks it means the same and
// formats the same.
func roundTrip(t *testing.T, d *policy.Domain) []byte {
	t.Helper()
	out, err := policy.Format(d, policy.Notes{})
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	back, err := policy.Parse("formatted.yaml", out)
	if err != nil {
		t.Fatalf("the formatted policy does not parse:\n%v\n%s", err, out)
	}
	if !reflect.DeepEqual(withoutPlaces(d), withoutPlaces(back)) {
		t.Fatalf("the formatted policy means something else:\n%s", out)
	}
	again, _ := policy.Format(back, policy.Notes{})
	if string(again) != string(out) {
		t.Fatalf("formatting is not stable:\n%s\nthen\n%s", out, again)
	}
	return out
}

// TestFormatRoundTrip: every policy in the repository (examples, compat
// samples, bench policies) formats to a file that parses back to the same
// domain.
func TestFormatRoundTrip(t *testing.T) {
	n := 0
	for _, root := range []string{"../../config", "../../test/bench"} {
		err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".yaml") || e.Name() == "expect.yaml" ||
				strings.Contains(path, "reject") || strings.Contains(path, "scenarios") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			d, err := policy.Parse(path, data)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return nil
			}
			t.Run(path, func(t *testing.T) { roundTrip(t, d) })
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 20 {
		t.Fatalf("only %d policies found", n)
	}
}

// TestFormatWritesThePolicyAsWritten: YAML keys, durations as people write
// them, defaults left out, notes as comments.
func TestFormatWritesThePolicyAsWritten(t *testing.T) {
	src := `domain: edge
descriptors:
  - key: remote_address
    mode: leased
    lease: {batch: 10, low_water: 3, return_idle_after: 1m30s}
    on_store_error: allow
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20}
  - key: path
    value: "123"
    rate_limits:
      - {name: a, unit: second, unit_multiplier: 30, requests_per_unit: 10}
      - {name: b, unit: hour, requests_per_unit: 1, replaces: [{name: a}]}
concurrency:
  - name: checkout
    match: {path_prefix: /checkout}
    controller: p95
    params: {target: 120ms, tolerance: 0.2}
    queue: {max: 3, timeout: 50ms}
    reject: {status: 429, retry_after: 1h}
`
	d := parse(t, src)
	out, err := policy.Format(d, policy.Notes{
		Limit: func(l *policy.Limit) string { return "per " + string(l.Unit) },
		Gate:  func(g *policy.Gate) string { return "gate " + g.Name },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `domain: edge
descriptors:
  - key: remote_address
    mode: leased
    lease: {batch: 10, low_water: 3, return_idle_after: 1m30s}
    on_store_error: allow
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20} # per second
  - key: path
    value: "123"
    rate_limits:
      - {name: a, unit: second, unit_multiplier: 30, requests_per_unit: 10} # per second
      - {name: b, unit: hour, requests_per_unit: 1, replaces: [{name: a}]} # per hour
concurrency:
  - name: checkout # gate checkout
    match: {path_prefix: /checkout}
    controller: p95
    params: {target: 120ms, tolerance: 0.2}
    queue: {max: 3, timeout: 50ms}
    reject: {status: 429, retry_after: 1h}
`
	if string(out) != want {
		t.Errorf("Format:\n%s\nwant:\n%s", out, want)
	}
	roundTrip(t, d)
}
