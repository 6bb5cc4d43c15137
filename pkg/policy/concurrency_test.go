package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

func TestConcurrencySection(t *testing.T) {
	d, err := policy.Parse("gates.yaml", []byte(`
concurrency:
  - name: checkout
    match: {authority: "shop.*", path_prefix: /checkout, header: {name: X-Tier, value: gold}}
    controller: p95
    min_limit: 2
    max_limit: 200
    initial_limit: 20
    params: {target_p95: 150ms, tolerance: 0.1}
    queue: {max: 50, timeout: 100ms, order: lifo}
    reject: {status: 429, retry_after: 2s}
  - name: everything
    match: {path_prefix: /}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "" || len(d.Gates) != 2 {
		t.Fatalf("domain %q, %d gates", d.Name, len(d.Gates))
	}
	g := d.Gates[0]
	if g.Name != "checkout" || g.Controller != "p95" || g.MinLimit != 2 || g.MaxLimit != 200 || g.InitialLimit != 20 ||
		g.Match.Authority != "shop.*" || g.Match.PathPrefix != "/checkout" || g.Match.Header.Name != "x-tier" || g.Match.Header.Value != "gold" ||
		g.Params["target_p95"].Value != "150ms" || g.Params["target_p95"].Pos.Line != 9 ||
		g.Queue != (policy.GateQueue{Max: 50, Timeout: 100 * time.Millisecond, LIFO: true}) ||
		g.Reject != (policy.GateReject{Status: 429, RetryAfter: 2 * time.Second}) {
		t.Fatalf("gate %+v", g)
	}
	if e := d.Gates[1]; e.Controller != "gradient2" || e.Reject.Status != 503 || e.Reject.RetryAfter != time.Second {
		t.Fatalf("defaults not filled: %+v", e)
	}
}

func TestConcurrencyRejections(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"concurrency:\n  - match: {path_prefix: /}\n", "a gate needs a name"},
		{"concurrency:\n  - name: a\n", `gate "a" has no match`},
		{"concurrency:\n  - name: a\n    match: {}\n", "match is empty"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: api}\n", "path_prefix must start with /"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\n    controller: pid\n", `unknown controller "pid"`},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\n    queue: {max: 5}\n", "a queue needs a timeout"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\n    queue: {max: 5, timeout: soon}\n", "positive Go duration"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\n    reject: {status: 200}\n", "not an error status"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\n    min_limit: 9\n    max_limit: 3\n", "min_limit (9) is above max_limit (3)"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\n    limit: 3\n", `unknown key "limit"`},
		{"concurrency: {name: a}\n", "concurrency must be a list"},
		{"concurrency:\n  - name: a\n    match: {path_prefix: /}\ndescriptors:\n  - key: k\n", "no domain"},
	} {
		_, err := policy.Parse("g.yaml", []byte(tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tc.src, err, tc.want)
		}
	}
}

func TestGateNamesUniqueAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\nconcurrency:\n  - name: g\n    match: {path_prefix: /a}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("concurrency:\n  - name: g\n    match: {path_prefix: /b}\n"), 0o644)
	_, err := policy.Load(dir)
	if err == nil || !strings.Contains(err.Error(), `gate "g" is already defined`) {
		t.Fatalf("err = %v", err)
	}
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("concurrency:\n  - name: h\n    match: {path_prefix: /b}\n"), 0o644)
	set, err := policy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Domains) != 1 || len(set.Gates) != 2 || set.Gates[0].Name != "g" || set.Gates[1].Name != "h" {
		t.Fatalf("set: %d domains, gates %v", len(set.Domains), set.Gates)
	}
}

func TestLeaseBatchAuto(t *testing.T) {
	d, err := policy.Parse("a.yaml", []byte("domain: a\ndescriptors:\n  - key: k\n    mode: leased\n    lease: {batch: auto, sizing: {order_cost: 4, strand_penalty: 0.5}}\n    rate_limit: {unit: second, requests_per_unit: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := d.Descriptors[0].Lease; !l.Auto || l.OrderCost != 4 || l.StrandPenalty != 0.5 || l.Batch != 0 {
		t.Fatalf("lease %+v", l)
	}
	for _, tc := range []struct{ lease, want string }{
		{"{batch: 10, sizing: {order_cost: 1}}", "it goes with batch: auto"},
		{"{batch: auto, sizing: {order_cost: -1}}", "order_cost must be a positive number"},
		{"{batch: auto, sizing: {cost: 1}}", `unknown key "cost"`},
		{"{batch: fast}", "batch must be a whole number"},
	} {
		_, err := policy.Parse("a.yaml", []byte("domain: a\ndescriptors:\n  - key: k\n    mode: leased\n    lease: "+tc.lease+"\n    rate_limit: {unit: second, requests_per_unit: 100}\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.lease, err, tc.want)
		}
	}
}

func TestFairness(t *testing.T) {
	d, err := policy.Parse("f.yaml", []byte(`
domain: f
descriptors:
  - key: route
    value: search
    descriptors:
      - key: tenant
        fairness: {tenant_key: tenant, weights: {gold: 3, free: 0.5}, default_weight: 1}
        rate_limit: {unit: second, requests_per_unit: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	fz := d.Descriptors[0].Descriptors[0].Fairness
	if fz == nil || fz.TenantKey != "tenant" || fz.Weights["gold"] != 3 || fz.Weights["free"] != 0.5 || fz.DefaultWeight != 1 || fz.MaxTenants != policy.DefaultFairTenants {
		t.Fatalf("fairness %+v", fz)
	}
	for _, tc := range []struct{ desc, want string }{
		{"fairness: {weights: {a: 1}}\n    rate_limit: {unit: second, requests_per_unit: 5}", "needs tenant_key"},
		{"fairness: {tenant_key: k, weights: {a: -1}}\n    rate_limit: {unit: second, requests_per_unit: 5}", "a weight must be a positive number"},
		{"fairness: {tenant_key: k}\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra}", "use algorithm: fixed_window"},
		{"fairness: {tenant_key: k}\n    rate_limits: [{unit: second, requests_per_unit: 5}, {unit: day, requests_per_unit: 50}]", "exactly one rate_limit"},
		{"fairness: {tenant_key: k}\n    mode: leased\n    rate_limit: {unit: second, requests_per_unit: 5}", "leases its budget itself"},
		{"fairness: {tenant_key: k}", "fairness has no limit to enforce"},
	} {
		_, err := policy.Parse("f.yaml", []byte("domain: f\ndescriptors:\n  - key: k\n    "+tc.desc+"\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.desc, err, tc.want)
		}
	}
}

// TestFairnessMaxTenants: max_tenants sets how many tenants each counter
// tracks by name (default DefaultFairTenants); a value out of 1..
// MaxFairTenants, or not a whole number, is refused at its file, line and
// field.
func TestFairnessMaxTenants(t *testing.T) {
	src := func(v string) []byte {
		return []byte("domain: f\ndescriptors:\n  - key: k\n    fairness:\n      tenant_key: k\n      max_tenants: " + v + "\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	}
	for v, want := range map[string]int{"1": 1, "5000": 5000, "100000": policy.MaxFairTenants, "~": policy.DefaultFairTenants} {
		d, err := policy.Parse("f.yaml", src(v))
		if err != nil {
			t.Fatalf("max_tenants: %s: %v", v, err)
		}
		if got := d.Descriptors[0].Fairness.MaxTenants; got != want {
			t.Errorf("max_tenants: %s reads %d, want %d", v, got, want)
		}
		// Format writes it unless it is the default, and it reads back.
		out, err := policy.Format(d, policy.Notes{})
		if err != nil {
			t.Fatal(err)
		}
		if written := strings.Contains(string(out), "max_tenants:"); written != (want != policy.DefaultFairTenants) {
			t.Errorf("max_tenants: %s formats as:\n%s", v, out)
		}
		back, err := policy.Parse("f.yaml", out)
		if err != nil || back.Descriptors[0].Fairness.MaxTenants != want {
			t.Errorf("max_tenants: %s does not read back from:\n%s(%v)", v, out, err)
		}
	}
	const at = "f.yaml:6: descriptors[0].fairness.max_tenants: max_tenants must be a whole number from 1 to 100000"
	for _, v := range []string{"-1", "0", "100001", "9999999999999999999999", "1.5", "many", "[1]"} {
		_, err := policy.Parse("f.yaml", src(v))
		if err == nil || !strings.Contains(err.Error(), at) {
			t.Errorf("max_tenants: %s: err = %v, want %q", v, err, at)
		}
	}
}
