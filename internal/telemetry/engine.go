package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// The rules' and gates' series, read from the engine at scrape time.
// Labels are bounded: domain and rule name come from the policy, descriptor
// values only from detailed_metric / value_to_metric rules and at most
// engine.MaxMetricValues per rule.
var (
	descDecisions = prometheus.NewDesc("throttlekit_decisions_total",
		"Rate-limit verdicts by rule and code: ok, over_limit, near_limit (admitted with under a fifth of the limit left; also counted as ok), shadow (over the limit in shadow mode, admitted).",
		[]string{"domain", "rule", "code"}, nil)
	descValueDecisions = prometheus.NewDesc("throttlekit_decisions_by_value_total",
		"Verdicts of detailed_metric / value_to_metric rules by descriptor value (at most 100 values per rule, then _other).",
		[]string{"domain", "rule", "value", "code"}, nil)
	descCharges       = prometheus.NewDesc("throttlekit_charges_total", "Descriptors with a hits_addend of their own (check-then-charge), by kind: check_only (0: checked, not counted) and charge (counted in full, even past the limit).", []string{"domain", "rule", "kind"}, nil)
	descOverrunUnits  = prometheus.NewDesc("throttlekit_charge_overrun_units_total", "Units charges counted past the limit (a charge that overran is answered OVER_LIMIT and counted all the same).", []string{"domain", "rule"}, nil)
	descLocalHits     = prometheus.NewDesc("throttlekit_local_hits_total", "Checks served from leased credits in this process.", []string{"domain", "rule"}, nil)
	descCachedDenials = prometheus.NewDesc("throttlekit_cached_denials_total", "Checks denied from a remembered denial, without asking the store.", []string{"domain", "rule"}, nil)
	descLeasesReq     = prometheus.NewDesc("throttlekit_leases_requested_total", "Leases asked of the store.", []string{"domain", "rule"}, nil)
	descLeasesGranted = prometheus.NewDesc("throttlekit_leases_granted_total", "Leases the store granted (some credits).", []string{"domain", "rule"}, nil)
	descCreditsLeased = prometheus.NewDesc("throttlekit_credits_leased_total", "Credits leased from the store.", []string{"domain", "rule"}, nil)
	descStranded      = prometheus.NewDesc("throttlekit_credits_stranded_total", "Leased credits that expired unused at their window's end.", []string{"domain", "rule"}, nil)
	descReturned      = prometheus.NewDesc("throttlekit_credits_returned_total", "Leased credits given back to the store (idle, evicted, refunded, shutdown).", []string{"domain", "rule"}, nil)
	descFairShare     = prometheus.NewDesc("throttlekit_fair_share", "A fair rule's tenant's share of the current window, rounded up (the most it may be admitted): at most 100 tenants named per rule, the rest summed under _other, and the tenants past the rule's max_tenants (which share one overflow account) under _overflow.", []string{"domain", "rule", "tenant"}, nil)
	descLeaseBatch    = prometheus.NewDesc("throttlekit_lease_batch", "Credits the most recent lease asked for (the learned batch of batch: auto rules).", []string{"domain", "rule"}, nil)
	descL1Keys        = prometheus.NewDesc("throttlekit_l1_keys", "Keys held in this process's local tier.", []string{"domain", "rule"}, nil)
	descEvictions     = prometheus.NewDesc("throttlekit_l1_evictions_total", "Keys evicted from a full local tier.", []string{"domain", "rule"}, nil)
	descFallbacks     = prometheus.NewDesc("throttlekit_store_fallbacks_total", "Decisions made by on_store_error because the store failed.", []string{"domain", "rule"}, nil)
	descGateLimit     = prometheus.NewDesc("throttlekit_gate_limit", "A concurrency gate's current inferred limit.", []string{"gate", "controller"}, nil)
	descGateInflight  = prometheus.NewDesc("throttlekit_gate_inflight", "Requests a gate has admitted and not yet released.", []string{"gate"}, nil)
	descGateQueued    = prometheus.NewDesc("throttlekit_gate_queued", "Requests waiting in a gate's queue.", []string{"gate"}, nil)
	descGateAdmitted  = prometheus.NewDesc("throttlekit_gate_admitted_total", "Requests a gate admitted.", []string{"gate"}, nil)
	descGateRejected  = prometheus.NewDesc("throttlekit_gate_rejected_total", "Requests a gate turned away, by reason (limit, queue_full, queue_timeout, cancelled).", []string{"gate", "reason"}, nil)
	descRoundTrips    = prometheus.NewDesc("throttlekit_redis_round_trips_total", "Round trips to Redis (pipelines and single commands).", nil, nil)
	descRedisOps      = prometheus.NewDesc("throttlekit_redis_operations_total", "Operations sent to Redis (scripts run).", nil, nil)
	descRestarts      = prometheus.NewDesc("throttlekit_store_restarts_total", "Times the Redis server behind --redis-url was found to be a new one (restarted, or a replica promoted; its run_id changed): each may have forgotten the counts of the windows in place. Always 0 with the memory store.", nil, nil)
	descUnknownDomain = prometheus.NewDesc("throttlekit_unknown_domain_total", "Requests for a domain no policy file defines, answered OK (at most 100 domains, then _other).", []string{"domain"}, nil)
)

// EngineReader is what EngineCollector reads of the engine at each scrape;
// *engine.Engine is one. Implementations are safe for concurrent use.
type EngineReader interface {
	Snapshot() []engine.RuleSnapshot
	GateSnapshots() []adaptive.Snapshot
	UnknownDomains() map[string]int64
}

// EngineCollector is the rules' counters, the limiters' and the gates'
// stats, the unknown domains and the store's, read at each scrape. Engine
// must be set; Restarts and Redis are nil with the memory store. Safe for
// concurrent scrapes when what it reads is.
type EngineCollector struct {
	Engine EngineReader
	// Restarts returns how many times the Redis server was found to be a
	// new one (redisstore.Store.Forgot); nil: 0, the memory store's.
	Restarts func() uint64
	// Redis returns the Redis store's counters; nil: no Redis series.
	Redis func() redisstore.Stats
}

// Describe sends the descriptors of every series c collects.
func (c EngineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descValueDecisions, descCharges, descOverrunUnits, descLocalHits, descCachedDenials, descLeasesReq,
		descLeasesGranted, descCreditsLeased, descStranded, descReturned, descL1Keys, descEvictions, descFallbacks, descRoundTrips, descRedisOps, descRestarts,
		descFairShare, descLeaseBatch, descGateLimit, descGateInflight, descGateQueued, descGateAdmitted, descGateRejected, descUnknownDomain} {
		ch <- d
	}
}

// Collect sends every rule's, gate's and unknown domain's series, and the
// store's, read now.
func (c EngineCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, s := range c.Engine.Snapshot() {
		dom, rule := s.Ref.Domain, s.Ref.Name
		counter(descDecisions, s.Decisions.OK, dom, rule, "ok")
		counter(descDecisions, s.Decisions.OverLimit, dom, rule, "over_limit")
		counter(descDecisions, s.Decisions.NearLimit, dom, rule, "near_limit")
		counter(descDecisions, s.Decisions.Shadow, dom, rule, "shadow")
		counter(descCharges, s.Charges.CheckOnly, dom, rule, "check_only")
		counter(descCharges, s.Charges.Charged, dom, rule, "charge")
		counter(descOverrunUnits, s.Charges.OverrunUnits, dom, rule)
		for v, d := range s.Values {
			counter(descValueDecisions, d.OK, dom, rule, v, "ok")
			counter(descValueDecisions, d.OverLimit, dom, rule, v, "over_limit")
			counter(descValueDecisions, d.NearLimit, dom, rule, v, "near_limit")
			counter(descValueDecisions, d.Shadow, dom, rule, v, "shadow")
		}
		for tenant, share := range s.FairShares {
			ch <- prometheus.MustNewConstMetric(descFairShare, prometheus.GaugeValue, float64(share), dom, rule, tenant)
		}
		if s.Algorithm == "unlimited" || s.Algorithm == "blocked" || s.Algorithm == "fair" {
			continue
		}
		l := s.Limiter
		counter(descLocalHits, l.LocalHits, dom, rule)
		counter(descCachedDenials, l.CachedDenials, dom, rule)
		counter(descLeasesReq, l.LeasesRequested, dom, rule)
		counter(descLeasesGranted, l.LeasesGranted, dom, rule)
		counter(descCreditsLeased, l.CreditsLeased, dom, rule)
		counter(descStranded, l.CreditsStranded, dom, rule)
		counter(descReturned, l.CreditsReturned, dom, rule)
		counter(descEvictions, l.Evictions, dom, rule)
		counter(descFallbacks, l.Fallbacks, dom, rule)
		ch <- prometheus.MustNewConstMetric(descL1Keys, prometheus.GaugeValue, float64(l.Keys), dom, rule)
		if s.Mode == gale.Leased {
			ch <- prometheus.MustNewConstMetric(descLeaseBatch, prometheus.GaugeValue, float64(l.LastBatch), dom, rule)
		}
	}
	for _, g := range c.Engine.GateSnapshots() {
		gauge := func(d *prometheus.Desc, v int, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
		}
		gauge(descGateLimit, g.Limit, g.Name, g.Controller)
		gauge(descGateInflight, g.Inflight, g.Name)
		gauge(descGateQueued, g.Queued, g.Name)
		counter(descGateAdmitted, g.Allowed, g.Name)
		// Each refusal under one reason: the gate's Rejected includes its
		// queue-full ones.
		counter(descGateRejected, g.Rejected-g.RejectedQueueFull, g.Name, "limit")
		counter(descGateRejected, g.RejectedQueueFull, g.Name, "queue_full")
		counter(descGateRejected, g.TimedOutInQueue, g.Name, "queue_timeout")
		counter(descGateRejected, g.Cancelled, g.Name, "cancelled")
	}
	for domain, n := range c.Engine.UnknownDomains() {
		counter(descUnknownDomain, n, domain)
	}
	var restarts uint64 // the memory store never restarts: 0, so the alert's series exists
	if c.Restarts != nil {
		restarts = c.Restarts()
	}
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(restarts))
	if c.Redis != nil {
		st := c.Redis()
		ch <- prometheus.MustNewConstMetric(descRoundTrips, prometheus.CounterValue, float64(st.RoundTrips))
		ch <- prometheus.MustNewConstMetric(descRedisOps, prometheus.CounterValue, float64(st.Ops))
	}
}
