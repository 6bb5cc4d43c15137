package main

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// TestUnknownDomainMetric: requests for a domain no policy defines are
// counted in throttlekit_unknown_domain_total, by domain.
func TestUnknownDomainMetric(t *testing.T) {
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(e, nil)
	req := &engine.Request{Domain: "edgee", Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "k", Value: "v"}}}}}
	for i := 0; i < 3; i++ {
		if _, err := e.Decide(context.Background(), req, time.Unix(1800000000, 0)); err != nil {
			t.Fatal(err)
		}
	}
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		if f.GetName() != "throttlekit_unknown_domain_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				got = append(got, l.GetName()+"="+l.GetValue())
			}
			if v := s.GetCounter().GetValue(); v != 3 {
				t.Fatalf("throttlekit_unknown_domain_total %v = %v, want 3", got, v)
			}
		}
	}
	if len(got) != 1 || got[0] != "domain=edgee" {
		t.Fatalf("throttlekit_unknown_domain_total series %v, want one with domain=edgee", got)
	}
}
