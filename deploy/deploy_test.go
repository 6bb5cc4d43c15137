// Package deploy holds the files operators deploy beside throttlekit; its
// test checks they are well formed and name only metrics the sidecar has.
package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// exported lists the metric families the sidecar exposes (cmd/sidecar's
// metrics.go); histograms add _bucket, _sum and _count.
var exported = []string{
	"throttlekit_decisions_total", "throttlekit_decisions_by_value_total",
	"throttlekit_store_calls_total", "throttlekit_store_errors_total", "throttlekit_store_call_duration_seconds",
	"throttlekit_policy_reloads_total", "throttlekit_policy_last_reload_success_timestamp_seconds", "throttlekit_policy_info",
	"throttlekit_grpc_requests_total", "throttlekit_grpc_request_duration_seconds", "throttlekit_store_up",
	"throttlekit_gate_rtt_seconds", "throttlekit_gate_limit", "throttlekit_gate_inflight", "throttlekit_gate_queued",
	"throttlekit_gate_admitted_total", "throttlekit_gate_rejected_total",
	"throttlekit_local_hits_total", "throttlekit_cached_denials_total", "throttlekit_leases_requested_total",
	"throttlekit_leases_granted_total", "throttlekit_credits_leased_total", "throttlekit_credits_stranded_total",
	"throttlekit_credits_returned_total", "throttlekit_l1_keys", "throttlekit_l1_evictions_total",
	"throttlekit_store_fallbacks_total", "throttlekit_lease_batch", "throttlekit_fair_share", "throttlekit_redis_round_trips_total", "throttlekit_redis_operations_total",
}

func TestAlertRulesNameExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	metric := regexp.MustCompile(`throttlekit_[a-z0-9_]+`)
	n := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: a rule without alert name or expr", g.Name)
			}
			for _, m := range metric.FindAllString(r.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
				found := false
				for _, e := range exported {
					found = found || e == base
				}
				if !found {
					t.Errorf("alert %s uses %s, which the sidecar does not export", r.Alert, m)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d alert rules", n)
	}
}
