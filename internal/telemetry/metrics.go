package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

// Metrics are the sidecar's instruments that are updated where things
// happen (a store call, a gRPC call, a gate's release, a policy load); what
// can be read at scrape time is read by the collectors instead
// (EngineCollector and the rest). Labels are bounded: an op, a gRPC method
// and code, a gate of the policy. Safe for concurrent use.
type Metrics struct {
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
}

// NewMetrics makes the instruments and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		storeCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttlekit_store_calls_total", Help: "Calls to the counter store, by operation (check, lease, return, charge, announce: an RLQS sidecar recording its demand in the ledger the sidecars share a window by).",
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
		m.grpcRequests, m.grpcLatency, m.grpcStreams, m.storeReachable, m.gateRTT)
	// Every labelled series an alert reads exists from the start, at 0:
	// increase() and rate() cannot see the first increment of a series
	// that the increment creates.
	for _, result := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(result)
	}
	return m
}

// StoreCall records one call that reached the store: its operation (check,
// lease, return, charge, announce), how long it took, and whether it failed.
func (m *Metrics) StoreCall(op string, took time.Duration, err error) {
	m.storeCalls.WithLabelValues(op).Inc()
	m.storeLatency.WithLabelValues(op).Observe(took.Seconds())
	if err != nil {
		m.storeErrors.WithLabelValues(op).Inc()
	}
}

// StoreUp records what the store probe found.
func (m *Metrics) StoreUp(up bool) {
	if up {
		m.storeReachable.Set(1)
	} else {
		m.storeReachable.Set(0)
	}
}

// GateReleased records one request a gate admitted, released after rtt
// with outcome o. The gate label is bounded by the policy's gates.
func (m *Metrics) GateReleased(gate string, rtt time.Duration, o adaptive.Outcome) {
	outcome := "ok"
	switch o {
	case adaptive.Error, adaptive.Timeout:
		outcome = "error"
	case adaptive.Dropped:
		outcome = "dropped"
	}
	m.gateRTT.WithLabelValues(gate, outcome).Observe(rtt.Seconds())
}

// PolicyLoaded records a successful load of the policy hash, whose gates
// get their RTT series (at 0 until each gate's first request).
func (m *Metrics) PolicyLoaded(hash string, gates []adaptive.Snapshot) {
	m.reloads.WithLabelValues("success").Inc()
	m.reloadFailing.Set(0)
	m.lastReload.SetToCurrentTime()
	m.policyInfo.Reset()
	m.policyInfo.WithLabelValues(hash).Set(1)
	for _, g := range gates {
		for _, outcome := range []string{"ok", "error", "dropped"} {
			m.gateRTT.WithLabelValues(g.Name, outcome)
		}
	}
}

// PolicyRestored records that the source holds the policy in use again
// after a failure: a successful load, the failing gauge back at 0.
func (m *Metrics) PolicyRestored() {
	m.reloads.WithLabelValues("success").Inc()
	m.reloadFailing.Set(0)
}

// PolicyFailed records a set that failed to load while the previous policy
// stays in force (the failing gauge at 1).
func (m *Metrics) PolicyFailed() {
	m.reloads.WithLabelValues("failure").Inc()
	m.reloadFailing.Set(1)
}

// PolicyRejected counts a pushed set refused before it reached the loader
// (an xDS NACK); the failing gauge is left as it is.
func (m *Metrics) PolicyRejected() {
	m.reloads.WithLabelValues("failure").Inc()
}

// GRPCCall records one unary gRPC call: its method, status code and
// latency.
func (m *Metrics) GRPCCall(method, code string, took time.Duration) {
	m.grpcRequests.WithLabelValues(method, code).Inc()
	m.grpcLatency.WithLabelValues(method).Observe(took.Seconds())
}

// GRPCStream records one gRPC stream: its method, status code and
// lifetime.
func (m *Metrics) GRPCStream(method, code string, took time.Duration) {
	m.grpcRequests.WithLabelValues(method, code).Inc()
	m.grpcStreams.WithLabelValues(method).Observe(took.Seconds())
}
