package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// parse parses src as f.yaml, failing the test on error.
func parse(t *testing.T, src string) *policy.Domain {
	t.Helper()
	d, err := policy.Parse("f.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse:\n%v", err)
	}
	return d
}

func TestParseFillsDefaults(t *testing.T) {
	d := parse(t, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: Second, requests_per_unit: 10}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: parent
`)
	if d.Name != "edge" || d.File != "f.yaml" || len(d.Descriptors) != 3 {
		t.Fatalf("domain = %+v", d)
	}
	for _, desc := range d.Descriptors {
		if desc.Mode != policy.Strict || desc.OnStoreError != policy.OnErrorError || !desc.Lease.WindowCoupled {
			t.Errorf("%s: mode %q, on_store_error %q, lease %+v: defaults not filled", desc.Key, desc.Mode, desc.OnStoreError, desc.Lease)
		}
	}
	l := d.Descriptors[0].Limits[0]
	want := policy.Limit{Unit: policy.Second, RequestsPerUnit: 10, UnitMultiplier: 1, Algorithm: policy.FixedWindow,
		Pos: policy.Pos{File: "f.yaml", Line: 5, Column: 17}}
	if !equalLimit(*l, want) {
		t.Errorf("limit = %+v, want %+v", *l, want)
	}
	if l.Period() != time.Second {
		t.Errorf("Period = %v", l.Period())
	}
	u := d.Descriptors[1].Limits[0]
	if !u.Unlimited || u.Unit != "" || u.Algorithm != policy.FixedWindow || u.UnitMultiplier != 1 {
		t.Errorf("unlimited limit = %+v", *u)
	}
	if p := d.Descriptors[0].Pos; p.Line != 4 || p.Column != 5 {
		t.Errorf("descriptor Pos = %+v, want line 4 column 5 (its key)", p)
	}
	if len(d.Descriptors[2].Limits) != 0 {
		t.Errorf("placeholder has limits %v", d.Descriptors[2].Limits)
	}
}

func equalLimit(a, b policy.Limit) bool {
	return a.Name == b.Name && a.Unlimited == b.Unlimited && a.Unit == b.Unit &&
		a.RequestsPerUnit == b.RequestsPerUnit && a.UnitMultiplier == b.UnitMultiplier &&
		a.Algorithm == b.Algorithm && a.Burst == b.Burst && strings.Join(a.Replaces, ",") == strings.Join(b.Replaces, ",") &&
		a.Pos == b.Pos
}

func TestParseExtensions(t *testing.T) {
	d := parse(t, `
domain: api
descriptors:
  - key: user
    mode: LEASED
    on_store_error: allow
    lease: {batch: 10, low_water: 2, window_coupled: false, return_idle_after: 1m30s}
    rate_limit: {name: burst, unit: second, requests_per_unit: 5, algorithm: gcra, burst: 10}
    rate_limits:
      - {name: daily, unit: day, requests_per_unit: 1000, algorithm: sliding_window}
      - {unit: second, unit_multiplier: 30, requests_per_unit: 50, replaces: [{name: burst}]}
    descriptors:
      - key: path
        value: /v1/*
        share_threshold: true
        quota_mode: true
        detailed_metric: true
        value_to_metric: true
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 0}
`)
	u := d.Descriptors[0]
	if u.Mode != policy.Leased || u.OnStoreError != policy.OnErrorAllow {
		t.Errorf("mode %q on_store_error %q", u.Mode, u.OnStoreError)
	}
	if want := (policy.Lease{Batch: 10, LowWater: 2, WindowCoupled: false, ReturnIdleAfter: 90 * time.Second}); u.Lease != want {
		t.Errorf("lease = %+v, want %+v", u.Lease, want)
	}
	if len(u.Limits) != 3 {
		t.Fatalf("%d limits, want 3 (rate_limit then rate_limits)", len(u.Limits))
	}
	if l := u.Limits[0]; l.Name != "burst" || l.Algorithm != policy.GCRA || l.Burst != 10 {
		t.Errorf("limits[0] = %+v", *l)
	}
	if l := u.Limits[1]; l.Name != "daily" || l.Algorithm != policy.SlidingWindow || l.Unit != policy.Day {
		t.Errorf("limits[1] = %+v", *l)
	}
	if l := u.Limits[2]; l.UnitMultiplier != 30 || l.Period() != 30*time.Second || len(l.Replaces) != 1 || l.Replaces[0] != "burst" {
		t.Errorf("limits[2] = %+v", *l)
	}
	p := u.Descriptors[0]
	if !p.ShareThreshold || !p.QuotaMode || !p.DetailedMetric || !p.ValueToMetric || !p.ShadowMode || !p.HasWildcard() {
		t.Errorf("flags of %+v", *p)
	}
	if p.Limits[0].RequestsPerUnit != 0 || p.Limits[0].Unit != policy.Minute {
		t.Errorf("block limit = %+v", *p.Limits[0])
	}
}

// TestParseUpstreamForms: YAML forms envoyproxy/ratelimit (yaml.v2) accepts.
func TestParseUpstreamForms(t *testing.T) {
	d := parse(t, `
domain: 42
descriptors:
  - key: port
    value: 8080
    rate_limit: &rl {unit: MINUTE, requests_per_unit: 0x10}
  - key: flag
    value: yes
    detailed_metric: on
    shadow_mode: No
    rate_limit: {<<: *rl, requests_per_unit: 1_000}
  - key: date
    value: 2024-01-01
    rate_limit: *rl
  - key: nothing
    value: ~
    rate_limit:
    descriptors:
`)
	if d.Name != "42" {
		t.Errorf("domain %q", d.Name)
	}
	want := []struct {
		value string
		rpu   uint32
	}{{"8080", 16}, {"yes", 1000}, {"2024-01-01", 16}, {"", 0}}
	for i, w := range want {
		desc := d.Descriptors[i]
		if desc.Value != w.value {
			t.Errorf("descriptors[%d].value = %q, want %q", i, desc.Value, w.value)
		}
		if w.rpu != 0 && (len(desc.Limits) != 1 || desc.Limits[0].RequestsPerUnit != w.rpu || desc.Limits[0].Unit != policy.Minute) {
			t.Errorf("descriptors[%d] limits = %v, want %d per minute", i, desc.Limits, w.rpu)
		}
	}
	if f := d.Descriptors[1]; !f.DetailedMetric || f.ShadowMode {
		t.Errorf("YAML 1.1 booleans: detailed_metric %v shadow_mode %v", f.DetailedMetric, f.ShadowMode)
	}
	if n := d.Descriptors[3]; len(n.Limits) != 0 || len(n.Descriptors) != 0 {
		t.Errorf("null fields: %+v", *n)
	}
}

// TestParseCompositeKeys: upstream keys descriptors by key+"_"+value, so
// these two collide there; they are different descriptors and load here.
func TestParseCompositeKeys(t *testing.T) {
	d := parse(t, `
domain: d
descriptors:
  - {key: a, value: b_c}
  - {key: a_b, value: c}
`)
	if len(d.Descriptors) != 2 {
		t.Fatalf("%d descriptors", len(d.Descriptors))
	}
}

// TestParseErrorText pins the exact text of a few errors.
func TestParseErrorText(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"unknown unit", `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
  - key: c
    descriptors:
      - key: d
        rate_limit: {unit: secnd, requests_per_unit: 1}
`, `f.yaml:10: descriptors[1].descriptors[0].rate_limit.unit: unknown unit "secnd" (want second, minute, hour, day, week, month or year)`},
		{"requests_per_unit word", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: ten
`, `f.yaml:7: descriptors[0].rate_limit.requests_per_unit: requests_per_unit must be a whole number from 0 to 4294967295, not the string "ten"`},
		{"misplaced key", `
domain: d
descriptors:
  - key: a
    unit: second
`, `f.yaml:5: descriptors[0].unit: unknown key "unit" in a descriptor: it belongs inside rate_limit`},
		{"unknown key", `
domain: d
descriptors:
  - key: a
    colour: blue
`, `f.yaml:5: descriptors[0].colour: unknown key "colour" (a descriptor takes key, value, rate_limit, rate_limits, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, mode, lease, on_store_error, fairness and federation)`},
		{"not a map", `
domain: d
descriptors:
  - key: a
  - 7
`, `f.yaml:5: descriptors[1]: a descriptor must be a mapping (key: ..., value: ..., rate_limit: ...), not 7`},
		{"duplicate", `
domain: d
descriptors:
  - key: a
    value: b
  - value: b
    key: a
`, `f.yaml:7: descriptors[1]: duplicate descriptor: key "a" with value "b" is already defined at line 4 at this level; merge the two`},
		{"unlimited with unit", `
domain: d
descriptors:
  - key: a
    rate_limit: {unlimited: true, unit: day}
`, `f.yaml:5: descriptors[0].rate_limit.unit: an unlimited limit takes no unit (remove unit, or remove unlimited: true to enforce requests_per_unit per unit)`},
		{"missing unit", `
domain: d
descriptors:
  - key: a
    rate_limit:
      requests_per_unit: 3
`, `f.yaml:6: descriptors[0].rate_limit: no unit: add unit: second, minute, hour, day, week, month or year (or unlimited: true for a limit that never denies)`},
		{"replaces nothing", `
domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 1
      replaces: [{name: b}]
`, `f.yaml:8: descriptors[0].rate_limit.replaces[0].name: replaces "b", but no limit in domain "d" is named "b" (check the spelling, or give that limit name: b)`},
		{"empty file", "# nothing\n", `f.yaml: no domain: the file is empty or holds only comments (start it with domain: <name>)`},
		{"two documents", "domain: a\n---\ndomain: b\n", `f.yaml:2: a second YAML document starts here; a policy file holds one document (one domain): move it to a file of its own`},
		{"top not a mapping", "[a, b]\n", `f.yaml:1: the top level is a list, not a mapping (a policy file is a mapping: domain: <name> and descriptors: [...])`},
		{"lease without leased", `
domain: d
descriptors:
  - key: a
    lease: {batch: 5}
    rate_limit: {unit: second, requests_per_unit: 10}
`, `f.yaml:5: descriptors[0].lease: lease applies only with mode: leased (add mode: leased, or remove lease)`},
		{"low water", `
domain: d
descriptors:
  - key: a
    mode: leased
    lease: {batch: 5, low_water: 9}
    rate_limit: {unit: second, requests_per_unit: 10}
`, `f.yaml:6: descriptors[0].lease.low_water: low_water (9) must be below batch (5): it is the credit count at which a background refill starts`},
		{"mode without limit", `
domain: d
descriptors:
  - key: a
    mode: cached_deny
`, `f.yaml:5: descriptors[0].mode: mode has no limit to enforce: this descriptor has no rate_limit (add a rate_limit with a unit, or remove mode)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := policy.Parse("f.yaml", []byte(tc.src))
			if d != nil {
				t.Errorf("Parse returned a domain with an error")
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n%v\nwant:\n%s", err, tc.want)
			}
			var errs policy.Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Errorf("want one policy.Errors entry, got %#v", err)
			}
		})
	}
}

// TestParseCollectsEveryError: one file's problems come back together, in
// line order, even when later checks (replaces) find more.
func TestParseCollectsEveryError(t *testing.T) {
	_, err := policy.Parse("f.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: -3, replaces: [{name: nope}]}
    shadow_mode: "true"
  - key: ""
  - key: b
    rate_limits: [{unit: day, requests_per_unit: 1, burst: 2}]
    mode: leased
    lease: {batch: 0, return_idle_after: soon}
`))
	var errs policy.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("err = %v", err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{
		"descriptors[0].rate_limit.unit",
		"descriptors[0].rate_limit.requests_per_unit",
		"descriptors[0].rate_limit.replaces[0].name",
		"descriptors[0].shadow_mode",
		"descriptors[1].key",
		"descriptors[2].rate_limits[0].burst",
		"descriptors[2].lease.batch",
		"descriptors[2].lease.return_idle_after",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("fields:\n%s\nwant:\n%s\n\n%v", strings.Join(got, "\n"), strings.Join(want, "\n"), err)
	}
}

// TestParseHostileInput: aliases that expand without end or refer to
// themselves get an error, not a hang or a crash.
func TestParseHostileInput(t *testing.T) {
	cases := map[string]string{
		"self-referencing list": "domain: d\ndescriptors: &d\n  - key: a\n    descriptors: *d\n",
		"self-merging map":      "domain: d\ndescriptors:\n  - &m {key: a, <<: *m}\n",
		"billion laughs":        laughs(20),
		"deep nesting":          "domain: d\ndescriptors: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "\n",
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := policy.Parse("f.yaml", []byte(src))
			if time.Since(start) > 5*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			if err == nil {
				t.Error("Parse accepted it")
			}
			t.Log(err)
		})
	}
}

// laughs is a policy whose n levels of aliases expand to 2^n descriptors.
func laughs(n int) string {
	var b strings.Builder
	b.WriteString("domain: d\nlevels:\n  - &l0 [{key: a}]\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "  - &l%d [{key: a, descriptors: *l%d}, {key: b, descriptors: *l%d}]\n", i, i-1, i-1)
	}
	fmt.Fprintf(&b, "descriptors: *l%d\n", n)
	return b.String()
}
