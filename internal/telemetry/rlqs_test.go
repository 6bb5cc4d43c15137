package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

// TestRLQSCollector: a rule's counters become its series, labelled by
// domain and rule only; the blanket and skip series have fixed label sets;
// the server is read at each scrape.
func TestRLQSCollector(t *testing.T) {
	var s rlqsserver.Stats
	c := RLQSCollector{Stats: func() rlqsserver.Stats { return s }}
	base := testutil.CollectAndCount(c)
	if base != 1+5+8+4 { // streams, blanket (5 pairs), skipped (7 reasons, bad_report), superseded, refused streams, messages, actions
		t.Fatalf("no rule: %d series", base)
	}
	s = rlqsserver.Stats{
		Rules: []rlqsserver.RuleStats{{Rule: ratelimit.RuleRef{Domain: "api", Name: "per-tenant"},
			Assignments: 7, TopUps: 2, Units: 90, Expiries: 5, Abandons: 1, Allowed: 80, Denied: 9, Leased: 100, Returned: 10}},
		StreamsOpen: 3,
		Blanket:     map[rlqsserver.BlanketReason]int64{{Action: "deny_all", Reason: "refused"}: 2},
		Skipped:     map[string]int64{"bucket_id": 4},
	}
	if n := testutil.CollectAndCount(c); n != base+9 {
		t.Errorf("one rule: %d series, want %d", n, base+9)
	}
	for name, want := range map[string]float64{
		"throttlekit_rlqs_assignments_total":    7,
		"throttlekit_rlqs_top_ups_total":        2,
		"throttlekit_rlqs_assigned_units_total": 90,
		"throttlekit_rlqs_expiries_total":       5,
		"throttlekit_rlqs_abandons_total":       1,
		"throttlekit_rlqs_leased_units_total":   100,
		"throttlekit_rlqs_returned_units_total": 10,
		"throttlekit_rlqs_streams_open":         3,
	} {
		if got := only(t, c, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, m := range gather(t, c)["throttlekit_rlqs_reported_requests_total"] {
		if label(m, "domain") != "api" || label(m, "rule") != "per-tenant" {
			t.Errorf("labels %v", m.GetLabel())
		}
		want := map[string]float64{"allowed": 80, "denied": 9}[label(m, "verdict")]
		if m.GetCounter().GetValue() != want {
			t.Errorf("%s: %v, want %v", label(m, "verdict"), m.GetCounter().GetValue(), want)
		}
	}
	for _, m := range gather(t, c)["throttlekit_rlqs_blanket_actions_total"] {
		if label(m, "reason") == "refused" && m.GetCounter().GetValue() != 2 {
			t.Errorf("refused: %v, want 2", m.GetCounter().GetValue())
		}
	}
}
