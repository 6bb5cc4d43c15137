package policy_test

import (
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

func ExampleParse() {
	d, err := policy.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20}
  - key: remote_address
    value: 203.0.113.7
    rate_limit: {unit: Second, requests_per_unit: 0}
  - key: path
    value: /api/*
    rate_limits:
      - {name: api-burst, unit: second, requests_per_unit: 10}
      - {name: api-daily, unit: day, requests_per_unit: 5000}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("domain", d.Name)
	for _, desc := range d.Descriptors {
		fmt.Printf("%s=%q wildcard=%v mode=%s\n", desc.Key, desc.Value, desc.HasWildcard(), desc.Mode)
		for _, l := range desc.Limits {
			fmt.Printf("  %q: %d per %v, %s, burst %d\n", l.Name, l.RequestsPerUnit, l.Period(), l.Algorithm, l.Burst)
		}
	}

	_, err = policy.Parse("bad.yaml", []byte("domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: secnd}\n"))
	fmt.Println(err)
	// Output:
	// domain edge
	// remote_address="" wildcard=false mode=strict
	//   "": 100 per 1s, gcra, burst 20
	// remote_address="203.0.113.7" wildcard=false mode=strict
	//   "": 0 per 1s, fixed_window, burst 0
	// path="/api/*" wildcard=true mode=strict
	//   "api-burst": 10 per 1s, fixed_window, burst 0
	//   "api-daily": 5000 per 24h0m0s, fixed_window, burst 0
	// bad.yaml:4: descriptors[0].rate_limit.unit: unknown unit "secnd" (want second, minute, hour, day, week, month or year)
}

func ExampleFormat() {
	d, err := policy.Parse("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    mode: leased
    lease: {batch: 10, return_idle_after: 90s}
    rate_limit: {unit: Second, requests_per_unit: 100, algorithm: gcra, burst: 20}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := policy.Format(d, policy.Notes{
		Limit: func(l *policy.Limit) string { return fmt.Sprintf("%d per %v", l.RequestsPerUnit, l.Period()) },
	})
	fmt.Print(string(out))
	// Output:
	// domain: edge
	// descriptors:
	//   - key: remote_address
	//     mode: leased
	//     lease: {batch: 10, return_idle_after: 1m30s}
	//     rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20} # 100 per 1s
}
