package telemetry

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// TestFederationCollector: one rule's counters become its series, leases
// split by result (granted is what neither partial nor denied took), the
// outage mode a label of coordinator_down; the rules are read at each
// scrape, not when the collector is made.
func TestFederationCollector(t *testing.T) {
	var rules []FederatedRule
	c := FederationCollector{Rules: func() []FederatedRule { return rules }}
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("no federated rule: %d series, want 0", n)
	}
	rules = []FederatedRule{{Ref: engine.RuleRef{Domain: "api", Name: "per_tenant"}, Outage: federation.RegionalOnly, Stats: federation.Stats{
		Leases: 10, Partial: 2, Denied: 3, LeaseErrors: 4, Leased: 500,
		EscrowTaken: 120, Refilled: 30, Released: 5, RefillUnknown: 1, Balance: 77,
		ReconcileApplied: 6, ReconcileDuplicate: 1, ReconcileExpired: 2, ReconcileFailed: 3, ReconcileLost: 0,
		Regional: 40, Outages: 2, Down: true,
	}}}
	want := `
# HELP throttlekit_federation_coordinator_down 1 while federated rules of this outage mode leave the coordinator alone after a failed lease (until --federation-probe-after has passed and it answers).
# TYPE throttlekit_federation_coordinator_down gauge
throttlekit_federation_coordinator_down{domain="api",outage="regional_only",rule="per_tenant"} 1
# HELP throttlekit_federation_escrow_balance The region's escrow balance this process last saw (of the key it last took from).
# TYPE throttlekit_federation_escrow_balance gauge
throttlekit_federation_escrow_balance{domain="api",rule="per_tenant"} 77
# HELP throttlekit_federation_leases_total Leases the cross-region coordinator answered, by result: granted (all asked), partial (less: other regions raced the budget down), denied (nothing), error (unanswered).
# TYPE throttlekit_federation_leases_total counter
throttlekit_federation_leases_total{domain="api",result="denied",rule="per_tenant"} 3
throttlekit_federation_leases_total{domain="api",result="error",rule="per_tenant"} 4
throttlekit_federation_leases_total{domain="api",result="granted",rule="per_tenant"} 5
throttlekit_federation_leases_total{domain="api",result="partial",rule="per_tenant"} 2
# HELP throttlekit_federation_reconciles_total Give-backs of unused units to the coordinator, by result: applied, duplicate (a retry of one applied before), expired (its window had ended), failed (an attempt that got no answer; retried), lost (dropped unsent, too many waiting).
# TYPE throttlekit_federation_reconciles_total counter
throttlekit_federation_reconciles_total{domain="api",result="applied",rule="per_tenant"} 6
throttlekit_federation_reconciles_total{domain="api",result="duplicate",rule="per_tenant"} 1
throttlekit_federation_reconciles_total{domain="api",result="expired",rule="per_tenant"} 2
throttlekit_federation_reconciles_total{domain="api",result="failed",rule="per_tenant"} 3
throttlekit_federation_reconciles_total{domain="api",result="lost",rule="per_tenant"} 0
`
	names := []string{"throttlekit_federation_coordinator_down", "throttlekit_federation_escrow_balance",
		"throttlekit_federation_leases_total", "throttlekit_federation_reconciles_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	for name, v := range map[string]float64{
		"throttlekit_federation_leased_units_total":   500,
		"throttlekit_federation_regional_units_total": 40,
		"throttlekit_federation_outages_total":        2,
	} {
		if got := only(t, c, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	escrow := map[string]float64{}
	for _, m := range gather(t, c)["throttlekit_federation_escrow_units_total"] {
		escrow[label(m, "op")] = m.GetCounter().GetValue()
	}
	if escrow["taken"] != 120 || escrow["refilled"] != 30 || escrow["released"] != 5 || escrow["unknown"] != 1 || len(escrow) != 4 {
		t.Errorf("escrow units by op: %v", escrow)
	}
	if n := testutil.CollectAndCount(FederationCollector{}); n != 0 {
		t.Errorf("the zero collector: %d series, want 0", n)
	}
}

// TestFleetCollector: a distributed gate's node stats become its series:
// gauges of what it admits up to and why, fenced and duplicate as 0 or 1,
// heartbeat errors split by reason.
func TestFleetCollector(t *testing.T) {
	nodes := []engine.NodeStat{{Gate: "backend", Stats: distributed.Stats{
		Local: 40, Global: 90, Share: 30, Ceiling: 30, Live: 3, Fenced: false, Duplicate: true, GenLag: 2,
		RoundTrips: 100, Errors: 7, Duplicates: 5, Fencings: 1,
	}}}
	c := FleetCollector{Nodes: func() []engine.NodeStat { return nodes }}
	want := `
# HELP throttlekit_gate_fleet_ceiling What this sidecar admits up to now: min(its share or outage share, its local limit); 0 while fenced.
# TYPE throttlekit_gate_fleet_ceiling gauge
throttlekit_gate_fleet_ceiling{gate="backend"} 30
# HELP throttlekit_gate_fleet_coordinator_errors_total Heartbeats that failed, by reason: duplicate (another live sidecar has this --node-id) or error.
# TYPE throttlekit_gate_fleet_coordinator_errors_total counter
throttlekit_gate_fleet_coordinator_errors_total{gate="backend",reason="duplicate"} 5
throttlekit_gate_fleet_coordinator_errors_total{gate="backend",reason="error"} 2
# HELP throttlekit_gate_fleet_duplicate 1 while the coordinator refuses this sidecar's node as a duplicate: another live sidecar has this --node-id, and this one is left out of the fleet (not ready).
# TYPE throttlekit_gate_fleet_duplicate gauge
throttlekit_gate_fleet_duplicate{gate="backend"} 1
# HELP throttlekit_gate_fleet_fenced 1 while this sidecar has fenced itself (its lease is about to end unrenewed) and admits nothing.
# TYPE throttlekit_gate_fleet_fenced gauge
throttlekit_gate_fleet_fenced{gate="backend"} 0
`
	names := []string{"throttlekit_gate_fleet_ceiling", "throttlekit_gate_fleet_coordinator_errors_total",
		"throttlekit_gate_fleet_duplicate", "throttlekit_gate_fleet_fenced"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	for name, v := range map[string]float64{
		"throttlekit_gate_fleet_local_limit":                   40,
		"throttlekit_gate_fleet_global_limit":                  90,
		"throttlekit_gate_fleet_share":                         30,
		"throttlekit_gate_fleet_sidecars":                      3,
		"throttlekit_gate_fleet_generation_lag":                2,
		"throttlekit_gate_fleet_coordinator_round_trips_total": 100,
		"throttlekit_gate_fleet_fencings_total":                1,
	} {
		if got := only(t, c, name); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
	if n := testutil.CollectAndCount(FleetCollector{}); n != 0 {
		t.Errorf("the zero collector: %d series, want 0", n)
	}
}

// TestCollectorsLint: every series the collectors describe passes
// Prometheus's naming lint, and each registers beside the other.
func TestCollectorsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	fed := FederationCollector{Rules: func() []FederatedRule {
		return []FederatedRule{{Ref: engine.RuleRef{Domain: "d", Name: "r"}, Outage: federation.FailClosed}}
	}}
	fleet := FleetCollector{Nodes: func() []engine.NodeStat { return []engine.NodeStat{{Gate: "g"}} }}
	if err := reg.Register(fed); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(fleet); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
