package main

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// TestCostMetrics: per rule of a domain with cost limits, the units
// reserved, refunded and charged beyond the reservation, and the extra that
// went past the limit; a domain without cost limits has no such series.
func TestCostMetrics(t *testing.T) {
	ctx := context.Background()
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	var set policy.Set
	for name, src := range map[string]string{
		"llm.yaml": `
domain: llm
descriptors:
  - key: tenant
    rate_limit: {name: tokens, unit: hour, requests_per_unit: 5000}
costs:
  - name: chat
    match: {path_prefix: /}
    descriptor: [{key: tenant, header: x-tenant}]
    reserve: 2000
    cost: {response_header: x-tokens}
`,
		"edge.yaml": "domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
	} {
		d, err := policy.Parse(name, []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		set.Domains = append(set.Domains, d)
	}
	if err := e.Load(ctx, &set); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(e, nil)
	now := time.Unix(1_800_000_000, 0)
	r := func() *engine.Reservation {
		res, _, err := e.Reserve(ctx, &engine.Request{Domain: "llm", HitsAddend: 2000,
			Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "tenant", Value: "t"}}}}}, now)
		if err != nil || res == nil {
			t.Fatalf("reserve: %v %v", res, err)
		}
		return res
	}
	a, b := r(), r()
	if _, err := a.Settle(ctx, 500, now); err != nil { // 1500 back
		t.Fatal(err)
	}
	if _, err := b.Settle(ctx, 5000, now); err != nil { // 3000 more, on 2500 counted of 5000: 500 past
		t.Fatal(err)
	}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "throttlekit_cost_") {
			continue
		}
		if f.GetHelp() == "" || f.GetType().String() != "COUNTER" {
			t.Errorf("%s: help %q, type %v", f.GetName(), f.GetHelp(), f.GetType())
		}
		for _, s := range f.GetMetric() {
			labels := ""
			for _, l := range s.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			got[f.GetName()+"{"+labels+"}"] = fmt.Sprint(s.GetCounter().GetValue())
		}
	}
	want := map[string]string{
		"throttlekit_cost_reserved_units_total{domain=llm,rule=tokens,}": "4000",
		"throttlekit_cost_refunded_units_total{domain=llm,rule=tokens,}": "1500",
		"throttlekit_cost_extra_units_total{domain=llm,rule=tokens,}":    "3000",
		"throttlekit_cost_overrun_units_total{domain=llm,rule=tokens,}":  "3000",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("cost series\n%v\nwant\n%v", got, want)
	}
}
