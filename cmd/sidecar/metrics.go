package main

import (
	"cmp"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/internal/telemetry"
	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// metrics wires the sidecar's telemetry: its registry, the instruments
// (internal/telemetry.Metrics) updated where things happen, and the
// collectors that read the engine, the store, the federation and the
// fleet at scrape time.
type metrics struct {
	*telemetry.Metrics
	reg *prometheus.Registry
	e   *engine.Engine   // its gates get their gate RTT series at each load
	fed *federationParts // nil when not federated; set before serving
}

func newMetrics(e *engine.Engine, rs *redisstore.Store) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{Metrics: telemetry.NewMetrics(reg), reg: reg, e: e}
	ec := telemetry.EngineCollector{Engine: e}
	if rs != nil {
		ec.Restarts, ec.Redis = rs.Forgot, rs.Stats
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), ec,
		telemetry.FederationCollector{Rules: m.federatedRules},
		telemetry.FleetCollector{Nodes: func() []engine.NodeStat { return e.NodeStats(time.Now()) }},
		telemetry.CostCollector{Costs: e.CostSnapshot})
	// What the process is, whatever the scrape job is called: alerts find
	// throttlekit's targets by it (deploy/alerts.yaml's ThrottlekitDown).
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "throttlekit_build_info",
		Help:        "1, labelled with the release version and the Go version: marks a target as throttlekit's whatever its scrape job is named.",
		ConstLabels: prometheus.Labels{"version": releaseVersion(), "goversion": runtime.Version()}})
	info.Set(1)
	reg.MustRegister(info)
	return m
}

// releaseVersion is the version `throttlekit version` prints first.
func releaseVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return releaseVersionOf(bi)
}

// releaseVersionOf is the release version (version, set at build time),
// else bi's module version, else "(devel)"; bi may be nil.
func releaseVersionOf(bi *debug.BuildInfo) string {
	mod := ""
	if bi != nil {
		mod = bi.Main.Version
	}
	return cmp.Or(version, mod, "(devel)")
}

// federatedRules reads m.fed, which serve sets after newMetrics (nil: not
// federated, no series).
func (m *metrics) federatedRules() []telemetry.FederatedRule {
	if fed := m.fed; fed != nil {
		return fed.snapshot()
	}
	return nil
}

// storeUp records what the store probe found.
func (m *metrics) storeUp(up bool) { m.StoreUp(up) }

// observeGate records one request a gate admitted (envoyrls's Observe).
func (m *metrics) observeGate(gate string, rtt time.Duration, o adaptive.Outcome) {
	m.GateReleased(gate, rtt, o)
}

// policyLoaded records a successful load.
func (m *metrics) policyLoaded(hash string) { m.PolicyLoaded(hash, m.e.GateSnapshots()) }

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
			m.GRPCStream(method, status.Code(err).String(), time.Since(start))
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
			m.GRPCCall(method, status.Code(err).String(), time.Since(start))
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

// Announce records a demand in the store's demand ledger
// (gale.DemandLedger, which the RLQS sidecars share a window by), counted
// as the store's "announce" calls; gale.ErrNoLedger when it keeps none.
func (s *instrumentedStore) Announce(ctx context.Context, key string, r gale.Rule, member string, demand int64, now time.Time) ([]gale.Demand, error) {
	if _, ok := s.Store.(gale.DemandLedger); !ok {
		return nil, gale.ErrNoLedger // no call made: none counted
	}
	start := time.Now()
	d, err := gale.Announce(ctx, s.Store, key, r, member, demand, now)
	s.observe("announce", start, err)
	return d, err
}

func (s *instrumentedStore) observe(op string, start time.Time, err error) {
	s.m.StoreCall(op, time.Since(start), err)
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
