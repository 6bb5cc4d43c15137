package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
)

// TestMetricsReloads: both reload series exist from the start, at 0; a
// failed load sets the failing gauge, a restore clears it, and a pushed set
// refused before the loader counts a failure without touching it.
func TestMetricsReloads(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	reloads := func(result string) float64 { return testutil.ToFloat64(m.reloads.WithLabelValues(result)) }
	failing := func() float64 { return testutil.ToFloat64(m.reloadFailing) }
	if n := testutil.CollectAndCount(m.reloads); n != 2 {
		t.Fatalf("reload series at start: %d, want 2 (success, failure)", n)
	}
	for _, step := range []struct {
		name                      string
		do                        func()
		success, failure, failing float64
	}{
		{"failed", m.PolicyFailed, 0, 1, 1},
		{"rejected", m.PolicyRejected, 0, 2, 1},
		{"restored", m.PolicyRestored, 1, 2, 0},
		{"rejected again", m.PolicyRejected, 1, 3, 0},
		{"loaded", func() { m.PolicyLoaded("abc", []adaptive.Snapshot{{Name: "checkout"}}) }, 2, 3, 0},
	} {
		step.do()
		if reloads("success") != step.success || reloads("failure") != step.failure || failing() != step.failing {
			t.Fatalf("after %s: success %v failure %v failing %v, want %v %v %v", step.name,
				reloads("success"), reloads("failure"), failing(), step.success, step.failure, step.failing)
		}
	}
	// A loaded policy's gates have their RTT series, at 0.
	if n := testutil.CollectAndCount(m.gateRTT); n != 3 {
		t.Fatalf("gate RTT series after a load: %d, want 3 (ok, error, dropped)", n)
	}
	m.GateReleased("checkout", 5*time.Millisecond, adaptive.Timeout)
	if got := testutil.CollectAndCount(m.gateRTT); got != 3 {
		t.Fatalf("a timeout made a series of its own: %d series", got)
	}
}

// TestCostCollector: each rule's cost counters become its series, read at
// each scrape.
func TestCostCollector(t *testing.T) {
	var stats []engine.CostStats
	c := CostCollector{Costs: func() []engine.CostStats { return stats }}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("no cost limit: %d series, want 0", n)
	}
	stats = []engine.CostStats{{Ref: engine.RuleRef{Domain: "llm", Name: "tokens"}, Reserved: 2000, Refunded: 800, Extra: 50, Overrun: 10}}
	want := `
# HELP throttlekit_cost_extra_units_total Units settlements charged beyond their reservation: the real cost less the reservation, counted even past the limit.
# TYPE throttlekit_cost_extra_units_total counter
throttlekit_cost_extra_units_total{domain="llm",rule="tokens"} 50
# HELP throttlekit_cost_reserved_units_total Units cost-limit reservations took from the rule when requests started (ext_proc).
# TYPE throttlekit_cost_reserved_units_total counter
throttlekit_cost_reserved_units_total{domain="llm",rule="tokens"} 2000
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "throttlekit_cost_extra_units_total", "throttlekit_cost_reserved_units_total"); err != nil {
		t.Fatal(err)
	}
}
