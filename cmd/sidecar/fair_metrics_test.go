package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// TestFairShareMetricIsBounded: 300 tenants of a fair rule tracking 150 by
// name are all admitted, and throttlekit_fair_share names at most 100 of
// them, sums the other tracked ones under _other and the 150 past
// max_tenants under _overflow: 102 series at most, the shares summing to
// the 300 units asked.
func TestFairShareMetricIsBounded(t *testing.T) {
	ctx := context.Background()
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := policy.Parse("f.yaml", []byte(`
domain: f
descriptors:
  - key: tenant
    fairness: {tenant_key: tenant, max_tenants: 150}
    rate_limit: {unit: minute, requests_per_unit: 100000}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(ctx, &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(e, nil)
	now := time.Unix(1_800_000_000, 0)
	for i := range 300 {
		req := &engine.Request{Domain: "f", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "tenant", Value: fmt.Sprintf("t%03d", i)}}}}}
		resp, err := e.Decide(ctx, req, now)
		if err != nil || resp.Code != engine.CodeOK {
			t.Fatalf("tenant %d: %v %v, want OK", i, resp, err)
		}
	}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series, sum := map[string]float64{}, 0.0
	for _, f := range families {
		if f.GetName() != "throttlekit_fair_share" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "tenant" {
					series[l.GetValue()] = s.GetGauge().GetValue()
				}
			}
			sum += s.GetGauge().GetValue()
		}
	}
	if len(series) > engine.MaxMetricValues+2 || series["_overflow"] != 150 || series[engine.OtherValue] != 50 || sum != 300 {
		t.Fatalf("throttlekit_fair_share: %d series, _overflow %v, _other %v, Σ %v; want ≤ %d, 150, 50, 300",
			len(series), series["_overflow"], series[engine.OtherValue], sum, engine.MaxMetricValues+2)
	}
}
