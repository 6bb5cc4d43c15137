package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

// The RLQS service's metrics, read from the server's counters at scrape
// time. Labels are bounded: a rule of the policy (domain and rule, as the
// engine's rule metrics), a blanket action and its reason, a skip reason;
// never a bucket's values.
var (
	descRLQSAssignments    = prometheus.NewDesc("throttlekit_rlqs_assignments_total", "Token-bucket quota assignments sent to Envoys (RLQS), by rule.", []string{"domain", "rule"}, nil)
	descRLQSTopUps         = prometheus.NewDesc("throttlekit_rlqs_top_ups_total", "Assignments that topped up an Envoy which had spent its share mid-window (sent behind a DENY_ALL so the new bucket starts full; what the spent bucket had left stays charged), by rule; counted in throttlekit_rlqs_assignments_total too.", []string{"domain", "rule"}, nil)
	descRLQSUnits          = prometheus.NewDesc("throttlekit_rlqs_assigned_units_total", "Units assigned (the sum of the assignments' max_tokens), each charged in full to its window, by rule.", []string{"domain", "rule"}, nil)
	descRLQSExpiries       = prometheus.NewDesc("throttlekit_rlqs_expiries_total", "Assignments whose time to live ended (each ends before its window does) while their stream was subscribed, by rule.", []string{"domain", "rule"}, nil)
	descRLQSAbandons       = prometheus.NewDesc("throttlekit_rlqs_abandons_total", "AbandonActions sent (a subscription idle past --rlqs-abandon-idle), by rule.", []string{"domain", "rule"}, nil)
	descRLQSReported       = prometheus.NewDesc("throttlekit_rlqs_reported_requests_total", "Requests Envoys reported for the rule's buckets, by verdict (allowed, denied).", []string{"domain", "rule", "verdict"}, nil)
	descRLQSLeased         = prometheus.NewDesc("throttlekit_rlqs_leased_units_total", "Units the RLQS service leased from the store for its Envoys, by rule.", []string{"domain", "rule"}, nil)
	descRLQSReturned       = prometheus.NewDesc("throttlekit_rlqs_returned_units_total", "Units leased and never assigned, given back to their window, by rule.", []string{"domain", "rule"}, nil)
	descRLQSStreams        = prometheus.NewDesc("throttlekit_rlqs_streams_open", "RLQS streams (one per Envoy and domain) open now.", nil, nil)
	descRLQSBlanket        = prometheus.NewDesc("throttlekit_rlqs_blanket_actions_total", "Blanket actions sent, by action (allow_all, deny_all) and reason (no_limit: no limit matches the bucket; blocked: a limit of 0; refused: a limit RLQS cannot serve, logged with its rule; no_share: a subscribed Envoy left without a share of its window; expiring: an Envoy's share about to expire before its window ends).", []string{"action", "reason"}, nil)
	descRLQSSkipped        = prometheus.NewDesc("throttlekit_rlqs_skipped_usages_total", "Bucket usages of reports not served, by reason (bucket_id, entries, elapsed, counts, streams); bad_report counts whole messages refused with INVALID_ARGUMENT.", []string{"reason"}, nil)
	descRLQSSuperseded     = prometheus.NewDesc("throttlekit_rlqs_superseded_actions_total", "Bucket actions replaced, before they were sent, by a newer one for the same bucket and stream (an Envoy reading slower than its actions come); an assignment among them stays charged, which only under-admits.", nil, nil)
	descRLQSRefusedStreams = prometheus.NewDesc("throttlekit_rlqs_refused_streams_total", "RLQS streams refused because their client connection had --rlqs-max-streams-per-conn open already (an Envoy opens one per domain).", nil, nil)
	descRLQSMessages       = prometheus.NewDesc("throttlekit_rlqs_response_messages_total", "Response messages sent to Envoys.", nil, nil)
	descRLQSActions        = prometheus.NewDesc("throttlekit_rlqs_actions_sent_total", "Bucket actions sent to Envoys (a response message carries up to 1,000).", nil, nil)
)

// RLQSCollector is the throttlekit_rlqs_* series, read from Stats at each
// scrape (nil Stats: no series). Safe for concurrent scrapes.
type RLQSCollector struct {
	Stats func() rlqsserver.Stats
}

// Describe sends the descriptors of every series c collects.
func (RLQSCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRLQSAssignments, descRLQSTopUps, descRLQSUnits, descRLQSExpiries, descRLQSAbandons, descRLQSReported,
		descRLQSLeased, descRLQSReturned, descRLQSStreams, descRLQSBlanket, descRLQSSkipped, descRLQSSuperseded, descRLQSRefusedStreams, descRLQSMessages, descRLQSActions} {
		ch <- d
	}
}

// Collect sends the series, read from c.Stats now.
func (c RLQSCollector) Collect(ch chan<- prometheus.Metric) {
	if c.Stats == nil {
		return
	}
	s := c.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, r := range s.Rules {
		counter(descRLQSAssignments, r.Assignments, r.Rule.Domain, r.Rule.Name)
		counter(descRLQSTopUps, r.TopUps, r.Rule.Domain, r.Rule.Name)
		counter(descRLQSUnits, r.Units, r.Rule.Domain, r.Rule.Name)
		counter(descRLQSExpiries, r.Expiries, r.Rule.Domain, r.Rule.Name)
		counter(descRLQSAbandons, r.Abandons, r.Rule.Domain, r.Rule.Name)
		counter(descRLQSReported, r.Allowed, r.Rule.Domain, r.Rule.Name, "allowed")
		counter(descRLQSReported, r.Denied, r.Rule.Domain, r.Rule.Name, "denied")
		counter(descRLQSLeased, r.Leased, r.Rule.Domain, r.Rule.Name)
		counter(descRLQSReturned, r.Returned, r.Rule.Domain, r.Rule.Name)
	}
	ch <- prometheus.MustNewConstMetric(descRLQSStreams, prometheus.GaugeValue, float64(s.StreamsOpen))
	for _, a := range []string{"allow_all", "deny_all"} {
		for _, why := range []string{"no_limit", "blocked", "refused", "no_share", "expiring"} {
			if a == "allow_all" && why != "no_limit" || a == "deny_all" && why == "no_limit" {
				continue
			}
			counter(descRLQSBlanket, s.Blanket[rlqsserver.BlanketReason{Action: a, Reason: why}], a, why)
		}
	}
	for _, why := range []string{"bucket_id", "entries", "elapsed", "counts", "streams", "report", "buckets"} {
		counter(descRLQSSkipped, s.Skipped[why], why)
	}
	counter(descRLQSSkipped, s.BadReports, "bad_report")
	counter(descRLQSSuperseded, s.Superseded)
	counter(descRLQSRefusedStreams, s.RefusedStreams)
	counter(descRLQSMessages, s.Messages)
	counter(descRLQSActions, s.Actions)
}
