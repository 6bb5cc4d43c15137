package policy_test

import (
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

func TestFederatedDescriptor(t *testing.T) {
	d := parse(t, `
domain: api
descriptors:
  - key: tenant
    mode: federated
    federation: {batch: 50, outage: regional_only, regional_limit: 300}
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: sliding_window}
  - key: path
    mode: federated
    rate_limit: {unit: second, requests_per_unit: 10}
`)
	got := d.Descriptors[0].Federation
	if d.Descriptors[0].Mode != policy.Federated || got == nil || *got != (policy.Federation{Batch: 50, Outage: policy.RegionalOnly, RegionalLimit: 300}) {
		t.Fatalf("federation %+v, mode %s", got, d.Descriptors[0].Mode)
	}
	if def := d.Descriptors[1].Federation; def == nil || *def != (policy.Federation{Outage: policy.FailClosed}) {
		t.Fatalf("default federation %+v, want fail_closed and the default batch", def)
	}
	// Formatting and parsing again gives the same policy.
	out, err := policy.Format(d, policy.Notes{})
	if err != nil {
		t.Fatal(err)
	}
	again := parse(t, string(out))
	if *again.Descriptors[0].Federation != *got || again.Descriptors[1].Mode != policy.Federated {
		t.Fatalf("round trip lost the federation block:\n%s", out)
	}
}

func TestFederatedErrors(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"gcra", "mode: federated\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra}",
			"descriptors[0].rate_limit: mode: federated needs a windowed algorithm (fixed_window, sliding_window or quota): gcra has no window boundary"},
		{"token bucket", "mode: federated\n    rate_limits: [{unit: second, requests_per_unit: 10, algorithm: token_bucket}]",
			"token_bucket has no window boundary"},
		{"lease", "mode: federated\n    lease: {batch: 5}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			"descriptors[0].lease: a federated descriptor leases through its region: tune it with federation: {batch: ...}, not lease"},
		{"on_store_error", "mode: federated\n    on_store_error: allow\n    rate_limit: {unit: second, requests_per_unit: 10}",
			"descriptors[0].on_store_error: a federated descriptor answers outages with federation: {outage: fail_closed|regional_only}"},
		{"fairness", "mode: federated\n    fairness: {tenant_key: t}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			"descriptors[0].mode: fairness is not federated yet"},
		{"regional_only without a limit", "mode: federated\n    federation: {outage: regional_only}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			"descriptors[0].federation: outage: regional_only needs regional_limit"},
		{"regional_limit with fail_closed", "mode: federated\n    federation: {regional_limit: 3}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			"descriptors[0].federation.regional_limit: regional_limit applies only with outage: regional_only"},
		{"federation without the mode", "mode: leased\n    federation: {batch: 3}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			"descriptors[0].federation: federation applies only with mode: federated (add mode: federated, or remove federation)"},
		{"unknown outage", "mode: federated\n    federation: {outage: open}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			`descriptors[0].federation.outage: unknown outage "open" (want fail_closed or regional_only)`},
		{"unknown key", "mode: federated\n    federation: {bacth: 3}\n    rate_limit: {unit: second, requests_per_unit: 10}",
			`descriptors[0].federation.bacth: unknown key "bacth" (did you mean batch?)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := "domain: d\ndescriptors:\n  - key: a\n    " + tc.body + "\n"
			_, err := policy.Parse("f.yaml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error:\n%v\nwant it to contain:\n%s", err, tc.want)
			}
		})
	}
}
