package main

import (
	"context"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// metrics holds the sidecar's Prometheus instruments. Rule-level counters
// are read from the engine at scrape time (engineCollector); the rest are
// updated where things happen. Labels are bounded: domain and rule name come
// from the policy, descriptor values only from detailed_metric /
// value_to_metric rules and at most engine.MaxMetricValues per rule.
type metrics struct {
	reg            *prometheus.Registry
	storeCalls     *prometheus.CounterVec
	storeErrors    *prometheus.CounterVec
	storeLatency   *prometheus.HistogramVec
	reloads        *prometheus.CounterVec
	lastReload     prometheus.Gauge
	reloadFailing  prometheus.Gauge
	policyInfo     *prometheus.GaugeVec
	grpcRequests   *prometheus.CounterVec
	grpcLatency    *prometheus.HistogramVec
	grpcStreams    *prometheus.HistogramVec
	storeReachable prometheus.Gauge
	gateRTT        *prometheus.HistogramVec
	e              *engine.Engine   // its gates get their gateRTT series at each load
	fed            *federationParts // nil when not federated; set before serving
}

func newMetrics(e *engine.Engine, rs *redisstore.Store) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		e:   e,
		storeCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttlekit_store_calls_total", Help: "Calls to the counter store, by operation (check, lease, return, charge).",
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttlekit_store_errors_total", Help: "Store calls that failed, by operation.",
		}, []string{"op"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "throttlekit_store_call_duration_seconds", Help: "Store call latency, by operation.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttlekit_policy_reloads_total", Help: "Policy loads, by result (success, failure). A failure keeps the previous policy.",
		}, []string{"result"}),
		reloadFailing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttlekit_policy_reload_failing", Help: "1 while the policy source holds a set that failed to load (the previous policy is in force), 0 once a set loads or the one in use is restored.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttlekit_policy_last_reload_success_timestamp_seconds", Help: "When the policy in use was loaded.",
		}),
		policyInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "throttlekit_policy_info", Help: "1 for the policy in use, labelled with its content hash.",
		}, []string{"hash"}),
		grpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttlekit_grpc_requests_total", Help: "gRPC calls, by method and status code.",
		}, []string{"method", "code"}),
		grpcLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "throttlekit_grpc_request_duration_seconds", Help: "gRPC call latency, by method.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5},
		}, []string{"method"}),
		// A stream lives as long as what it serves (an ext_proc stream, the
		// upstream request): wider buckets than a unary call's.
		grpcStreams: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "throttlekit_grpc_stream_duration_seconds", Help: "gRPC stream lifetime, by method (ext_proc: request headers to the end of the stream).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		storeReachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttlekit_store_up", Help: "1 when the last store probe (every --store-probe-interval) got an answer; always 1 with the memory store.",
		}),
		gateRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "throttlekit_gate_rtt_seconds", Help: "Time from request headers to response headers of requests a concurrency gate admitted, by gate and outcome (ok, error, dropped).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"gate", "outcome"}),
	}
	reg.MustRegister(m.storeCalls, m.storeErrors, m.storeLatency, m.reloads, m.lastReload, m.reloadFailing, m.policyInfo,
		m.grpcRequests, m.grpcLatency, m.grpcStreams, m.storeReachable, m.gateRTT,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&engineCollector{e: e, rs: rs}, federationCollector{m}, fleetCollector{e: e, now: time.Now}, costCollector{e})
	// Every labelled series an alert reads exists from the start, at 0:
	// increase() and rate() cannot see the first increment of a series
	// that the increment creates.
	for _, result := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(result)
	}
	return m
}

// storeUp records what the store probe found.
func (m *metrics) storeUp(up bool) {
	if up {
		m.storeReachable.Set(1)
	} else {
		m.storeReachable.Set(0)
	}
}

// observeGate records one request a gate admitted. The gate label is
// bounded by the policy's gates.
func (m *metrics) observeGate(gate string, rtt time.Duration, o adaptive.Outcome) {
	outcome := "ok"
	switch o {
	case adaptive.Error, adaptive.Timeout:
		outcome = "error"
	case adaptive.Dropped:
		outcome = "dropped"
	}
	m.gateRTT.WithLabelValues(gate, outcome).Observe(rtt.Seconds())
}

// policyLoaded records a successful load.
func (m *metrics) policyLoaded(hash string) {
	m.reloads.WithLabelValues("success").Inc()
	m.reloadFailing.Set(0)
	m.lastReload.SetToCurrentTime()
	m.policyInfo.Reset()
	m.policyInfo.WithLabelValues(hash).Set(1)
	for _, g := range m.e.GateSnapshots() {
		for _, outcome := range []string{"ok", "error", "dropped"} {
			m.gateRTT.WithLabelValues(g.Name, outcome) // at 0 until the gate's first request
		}
	}
}

// serverOptions are the gRPC server's interceptors: every call is counted
// and timed, and a panic in its handler becomes an INTERNAL error instead of
// a crash.
func (m *metrics) serverOptions(log func(msg string, args ...any)) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(m.unaryInterceptor(log)), grpc.ChainStreamInterceptor(m.streamInterceptor(log))}
}

// streamInterceptor is unaryInterceptor for streams (ext_proc's Process):
// it counts each stream by method and status code, times it, and turns a
// panic into an INTERNAL error on that stream instead of a crash.
func (m *metrics) streamInterceptor(log func(msg string, args ...any)) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		start := time.Now()
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		defer func() {
			if p := recover(); p != nil {
				log("panic in gRPC stream handler", "method", info.FullMethod, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
			m.grpcRequests.WithLabelValues(method, status.Code(err).String()).Inc()
			m.grpcStreams.WithLabelValues(method).Observe(time.Since(start).Seconds())
		}()
		return handler(srv, ss)
	}
}

// unaryInterceptor counts and times every unary gRPC call, and turns a
// panic into an INTERNAL error instead of a crash.
func (m *metrics) unaryInterceptor(log func(msg string, args ...any)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		start := time.Now()
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		defer func() {
			if p := recover(); p != nil {
				log("panic in gRPC handler", "method", info.FullMethod, "panic", p)
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
			m.grpcRequests.WithLabelValues(method, status.Code(err).String()).Inc()
			m.grpcLatency.WithLabelValues(method).Observe(time.Since(start).Seconds())
		}()
		return handler(ctx, req)
	}
}

// inMemoryStore is an instrumentedStore over an in-memory store: it stays
// gale.InMemory, so limiters put no deadline on its calls.
type inMemoryStore struct{ *instrumentedStore }

func (inMemoryStore) InMemory() {}

// instrumentedStore counts and times the calls that reach the store.
type instrumentedStore struct {
	gale.Store
	m *metrics
}

func (s *instrumentedStore) observe(op string, start time.Time, err error) {
	s.m.storeCalls.WithLabelValues(op).Inc()
	s.m.storeLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.storeErrors.WithLabelValues(op).Inc()
	}
}

func (s *instrumentedStore) Check(ctx context.Context, key string, r gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	start := time.Now()
	d, err := s.Store.Check(ctx, key, r, cost, now)
	s.observe("check", start, err)
	return d, err
}

func (s *instrumentedStore) Lease(ctx context.Context, key string, r gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	start := time.Now()
	g, err := s.Store.Lease(ctx, key, r, min, max, now)
	s.observe("lease", start, err)
	return g, err
}

func (s *instrumentedStore) Charge(ctx context.Context, key string, r gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	start := time.Now()
	d, err := s.Store.Charge(ctx, key, r, n, now)
	s.observe("charge", start, err)
	return d, err
}

func (s *instrumentedStore) Return(ctx context.Context, key string, r gale.Rule, n int64, end, now time.Time) error {
	start := time.Now()
	err := s.Store.Return(ctx, key, r, n, end, now)
	s.observe("return", start, err)
	return err
}

// engineCollector reads the engine's rule counters and the limiters' stats
// at scrape time.
type engineCollector struct {
	e  *engine.Engine
	rs *redisstore.Store // nil with the memory store
}

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
	descFairShare     = prometheus.NewDesc("throttlekit_fair_share", "A fair rule's tenant's share of the current window: at most 100 tenants named per rule, the rest summed under _other, and the tenants past the rule's max_tenants (which share one overflow account) under _overflow.", []string{"domain", "rule", "tenant"}, nil)
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

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDecisions, descValueDecisions, descCharges, descOverrunUnits, descLocalHits, descCachedDenials, descLeasesReq,
		descLeasesGranted, descCreditsLeased, descStranded, descReturned, descL1Keys, descEvictions, descFallbacks, descRoundTrips, descRedisOps, descRestarts,
		descFairShare, descLeaseBatch, descGateLimit, descGateInflight, descGateQueued, descGateAdmitted, descGateRejected, descUnknownDomain} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, s := range c.e.Snapshot() {
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
	for _, g := range c.e.GateSnapshots() {
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
	for domain, n := range c.e.UnknownDomains() {
		counter(descUnknownDomain, n, domain)
	}
	var restarts uint64 // the memory store never restarts: 0, so the alert's series exists
	if c.rs != nil {
		restarts = c.rs.Forgot()
	}
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(restarts))
	if c.rs != nil {
		st := c.rs.Stats()
		ch <- prometheus.MustNewConstMetric(descRoundTrips, prometheus.CounterValue, float64(st.RoundTrips))
		ch <- prometheus.MustNewConstMetric(descRedisOps, prometheus.CounterValue, float64(st.Ops))
	}
}
