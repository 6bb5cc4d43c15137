package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/engine"
)

// UpstreamCollector serves envoyproxy/ratelimit's rate-limit metrics under
// the names its default statsd mapping gives them
// (src/stats/prom/default_mapper.yaml: ratelimit.service.rate_limit.DOMAIN.KEY1[.KEY2...].STAT
// becomes ratelimit_service_rate_limit_STAT{domain, key1[, key2]}), so that
// dashboards and alerts written for upstream keep working on a switch-over
// (`serve --upstream-metrics`, on with upstream's USE_PROMETHEUS=true).
// key1 and key2 are the first two levels of a rule's descriptor path (key,
// or key_value where the policy gives a value), key2 empty for a
// one-level rule: one label set for every series of a name, where
// upstream's two mappings made two. A series per rule, never per request
// value: its cardinality is the policy's. Counts are engine.UpstreamHits.
type UpstreamCollector struct {
	Rules func() []engine.RuleSnapshot
}

var upstreamDescs = [...]*prometheus.Desc{
	prometheus.NewDesc("ratelimit_service_rate_limit_total_hits", "Hits of the rule's descriptor (envoyproxy/ratelimit's name).", []string{"domain", "key1", "key2"}, nil),
	prometheus.NewDesc("ratelimit_service_rate_limit_within_limit", "Hits within the limit (envoyproxy/ratelimit's name).", []string{"domain", "key1", "key2"}, nil),
	prometheus.NewDesc("ratelimit_service_rate_limit_near_limit", "Hits within the limit past 80% of it (envoyproxy/ratelimit's name).", []string{"domain", "key1", "key2"}, nil),
	prometheus.NewDesc("ratelimit_service_rate_limit_over_limit", "Hits over the limit (envoyproxy/ratelimit's name).", []string{"domain", "key1", "key2"}, nil),
	prometheus.NewDesc("ratelimit_service_rate_limit_shadow_mode", "Hits over a shadow-mode limit, answered OK (envoyproxy/ratelimit's name).", []string{"domain", "key1", "key2"}, nil),
}

// Describe sends the five names' descriptors.
func (c UpstreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range upstreamDescs {
		ch <- d
	}
}

// Collect sends each (domain, key1, key2)'s counts, summed over the rules
// that share them (several limits of one descriptor, or paths alike in
// their first two levels).
func (c UpstreamCollector) Collect(ch chan<- prometheus.Metric) {
	type labels struct{ domain, key1, key2 string }
	sums := map[labels]*[5]int64{}
	var order []labels
	for _, s := range c.Rules() {
		if len(s.Path) == 0 || s.Algorithm == "unlimited" {
			continue
		}
		l := labels{domain: s.Ref.Domain, key1: s.Path[0]}
		if len(s.Path) > 1 {
			l.key2 = s.Path[1]
		}
		v := sums[l]
		if v == nil {
			v = &[5]int64{}
			sums[l] = v
			order = append(order, l)
		}
		u := s.Upstream
		for i, n := range [5]int64{u.TotalHits, u.WithinLimit, u.NearLimit, u.OverLimit, u.ShadowMode} {
			v[i] += n
		}
	}
	for _, l := range order {
		for i, d := range upstreamDescs {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(sums[l][i]), l.domain, l.key1, l.key2)
		}
	}
}
