package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// The federation's series, one set per federated rule (bounded by the
// policy), read from its region's counters at scrape time.
var (
	descFedLeases = prometheus.NewDesc("throttlekit_federation_leases_total",
		"Leases the cross-region coordinator answered, by result: granted (all asked), partial (less: other regions raced the budget down), denied (nothing), error (unanswered).",
		[]string{"domain", "rule", "result"}, nil)
	descFedLeased = prometheus.NewDesc("throttlekit_federation_leased_units_total",
		"Units the cross-region coordinator granted this process's region.", []string{"domain", "rule"}, nil)
	descFedEscrow = prometheus.NewDesc("throttlekit_federation_escrow_units_total",
		"Units through the region's escrow (L2), by op: taken by this process, refilled by it (a lease's surplus, units given back), released (a dead balance's leftover captured for reconcile), unknown (a refill that failed and may have landed: never given back to the coordinator, so in the escrow or lost to its window).",
		[]string{"domain", "rule", "op"}, nil)
	descFedBalance = prometheus.NewDesc("throttlekit_federation_escrow_balance",
		"The region's escrow balance this process last saw (of the key it last took from).", []string{"domain", "rule"}, nil)
	descFedReconciles = prometheus.NewDesc("throttlekit_federation_reconciles_total",
		"Give-backs of unused units to the coordinator, by result: applied, duplicate (a retry of one applied before), expired (its window had ended), failed (an attempt that got no answer; retried), lost (dropped unsent, too many waiting).",
		[]string{"domain", "rule", "result"}, nil)
	descFedRegional = prometheus.NewDesc("throttlekit_federation_regional_units_total",
		"Units granted from the regional budget while the coordinator was unreachable (outage: regional_only).", []string{"domain", "rule"}, nil)
	descFedDown = prometheus.NewDesc("throttlekit_federation_coordinator_down",
		"1 while federated rules of this outage mode leave the coordinator alone after a failed lease (until --federation-probe-after has passed and it answers).",
		[]string{"domain", "rule", "outage"}, nil)
	descFedOutages = prometheus.NewDesc("throttlekit_federation_outages_total",
		"Times the coordinator became unreachable for this rule's region.", []string{"domain", "rule"}, nil)
)

// FederatedRule is one federated rule's counters, as its region holds
// them when read.
type FederatedRule struct {
	Ref    engine.RuleRef
	Outage federation.Outage // the rule's outage mode: the outage label
	Stats  federation.Stats
}

// FederationCollector is the throttlekit_federation_* series, one set per
// federated rule, read from Rules at each scrape (nil Rules: no series).
// Safe for concurrent scrapes when Rules is.
type FederationCollector struct {
	// Rules returns every federated rule's counters, each rule once.
	Rules func() []FederatedRule
}

// Describe sends the descriptors of every series c collects.
func (FederationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFedLeases, descFedLeased, descFedEscrow, descFedBalance, descFedReconciles, descFedRegional, descFedDown, descFedOutages} {
		ch <- d
	}
}

// Collect sends each federated rule's series, read from c.Rules now.
func (c FederationCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Rules == nil {
		return
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range c.Rules() {
		dom, name, s := r.Ref.Domain, r.Ref.Name, r.Stats
		counter(descFedLeases, s.Leases-s.Partial-s.Denied, dom, name, "granted")
		counter(descFedLeases, s.Partial, dom, name, "partial")
		counter(descFedLeases, s.Denied, dom, name, "denied")
		counter(descFedLeases, s.LeaseErrors, dom, name, "error")
		counter(descFedLeased, s.Leased, dom, name)
		counter(descFedEscrow, s.EscrowTaken, dom, name, "taken")
		counter(descFedEscrow, s.Refilled, dom, name, "refilled")
		counter(descFedEscrow, s.Released, dom, name, "released")
		counter(descFedEscrow, s.RefillUnknown, dom, name, "unknown")
		ch <- prometheus.MustNewConstMetric(descFedBalance, prometheus.GaugeValue, float64(s.Balance), dom, name)
		counter(descFedReconciles, s.ReconcileApplied, dom, name, "applied")
		counter(descFedReconciles, s.ReconcileDuplicate, dom, name, "duplicate")
		counter(descFedReconciles, s.ReconcileExpired, dom, name, "expired")
		counter(descFedReconciles, s.ReconcileFailed, dom, name, "failed")
		counter(descFedReconciles, s.ReconcileLost, dom, name, "lost")
		counter(descFedRegional, s.Regional, dom, name)
		down := 0.0
		if s.Down {
			down = 1
		}
		ch <- prometheus.MustNewConstMetric(descFedDown, prometheus.GaugeValue, down, dom, name, r.Outage.String())
		counter(descFedOutages, s.Outages, dom, name)
	}
}
