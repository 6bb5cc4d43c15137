package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/throttlekit/throttlekit/internal/certs"
	"github.com/throttlekit/throttlekit/internal/telemetry"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
	"github.com/throttlekit/throttlekit/pkg/source"
)

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(c *serveConfig, w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.logLevel)
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.logFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h).With("node", c.nodeID)
}

// durationText writes a duration as Go writes it (1.5s), not as the JSON
// handler's nanoseconds (1500000000), in either log format.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// serve runs the sidecar until ctx ends or SIGTERM/SIGINT arrives, then
// drains: it stops accepting, lets in-flight calls finish within the drain
// timeout, returns leased credits and closes the store. It returns nil after
// a clean drain.
func serve(ctx context.Context, c *serveConfig, stderr io.Writer) error {
	log := newLogger(c, stderr)
	c.upstream.Log(log) // which envoyproxy/ratelimit variables it took (internal/upstreamenv)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var store gale.Store
	var rs *redisstore.Store
	var quotaStore *instrumentedStore // RLQS's, when it has its own
	var client redis.UniversalClient
	var ping pinger
	switch c.store {
	case "redis":
		redis.SetLogger(slogRedis{log})
		var err error
		watch := newRestartWatch(log)
		redisTLS, err := c.redisTLS.dialer(log)
		if err != nil {
			return c.namedErr(err, "--redis-tls-ca", "--redis-tls-cert", "--redis-tls-key")
		}
		if client, err = newRedisClient(c.redisURL, c.storeTimeout, watch, redisTLS); err != nil {
			return err
		}
		defer client.Close()
		if rs, err = redisstore.New(client, redisstore.Options{ServerTime: true, Timeout: max(4*c.storeTimeout, 200*time.Millisecond),
			WaitReplicas: c.waitReplicas, WaitTimeout: c.storeTimeout, Watch: watch}); err != nil {
			return err
		}
		defer rs.Close()
		store = rs
		ping = func(ctx context.Context) error { return client.Ping(ctx).Err() }
		if c.rlqs.enabled {
			// Leases and give-backs on a pool of their own, whose round
			// trips may take --rlqs-store-timeout: a request's store
			// calls keep theirs, and a slow lease holds none of their
			// connections.
			qc, err := redisClientFor("--redis-url", c.redisURL, c.rlqs.storeTimeout, nil, redisTLS)
			if err != nil {
				return err
			}
			defer qc.Close()
			qs, err := redisstore.New(qc, redisstore.Options{ServerTime: true, Timeout: c.rlqs.storeTimeout})
			if err != nil {
				return err
			}
			defer qs.Close()
			quotaStore = &instrumentedStore{Store: qs}
		}
		log.Info("store: redis", "url", Redact(c.redisURL))
	default:
		store = memstore.New()
		log.Info("store: memory (counters are this process's own)")
	}

	// The metrics wrapper needs the engine and the engine the wrapped store:
	// build the engine on a forwarding store.
	fwd := &instrumentedStore{Store: store}
	var engStore gale.Store = fwd
	if _, ok := store.(gale.InMemory); ok {
		engStore = inMemoryStore{fwd} // still needs no deadline per call
	} else if rs != nil {
		engStore = forgetfulStore{fwd, rs} // strict limiters keep their denials across a restart
	}
	fed, err := newFederation(ctx, c, client, rs, log)
	if err != nil {
		return err
	}
	fleet, err := newFleet(ctx, c, client, log)
	if err != nil {
		if fed != nil {
			fed.close()
		}
		return err
	}
	defer fleet.close()
	if fed != nil {
		defer fed.close()
	}
	eo := engineOptions(c, engStore, fed, fleet, log)
	if quotaStore != nil {
		eo.QuotaStore = quotaStore
	}
	eng, err := engine.New(eo)
	if err != nil {
		return err
	}
	m := newMetrics(eng, rs)
	m.fed = fed
	if c.upstreamMetrics {
		m.reg.MustRegister(telemetry.UpstreamCollector{Rules: eng.Snapshot})
	}
	fwd.m = m
	if quotaStore != nil {
		quotaStore.m = m
	}

	// One background probe says whether the store answers, for
	// throttlekit_store_up, and with --ready-needs-store for /readyz and
	// grpc.health.v1 too; without it they stay ready through a store
	// outage, each rule answering by its failure mode. The concurrency
	// gates (ext_proc) need no store: their service stays SERVING.
	hs := health.NewServer()
	probe := newStoreProbe(ping, c.storeTimeout, log, func(up bool) {
		status := healthpb.HealthCheckResponse_NOT_SERVING
		if up || !c.readyNeedsStore {
			status = healthpb.HealthCheckResponse_SERVING
		}
		m.storeUp(up)
		hs.SetServingStatus("", status)
		hs.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, status)
		if c.rlqs.enabled {
			hs.SetServingStatus(rlqspb.RateLimitQuotaService_ServiceDesc.ServiceName, status)
		}
	})
	if ping == nil {
		probe.record(nil) // the memory store is this process's own: always up
	} else {
		answer, refused := checkRedisAtStart(ctx, probe, c.redisURL, c.upstream.Took("REDIS_URL"))
		if refused != nil {
			return refused
		}
		probe.record(answer)
		if answer == nil {
			warnUnusedPassword(ctx, client, c.redisURL, c.upstream.Took("REDIS_AUTH"), log)
		}
	}
	rl := &reloader{dir: c.policyDir, tree: c.policyTree, engine: eng, metrics: m, log: log, debounce: c.reloadDebounce, loaded: make(chan string, 1)}
	var xds *source.XDS // the policy comes from an xDS server, or the directory (xdsserve.go)
	if c.xds.enabled() {
		if xds, err = newXDSSource(c, m, log); err != nil {
			return err
		}
		if c.xds.forceStart {
			if err := startWithoutPolicy(ctx, eng); err != nil {
				return err
			}
		}
	} else {
		if note := belowNote(c.policyDir); note != "" && !c.policyTree {
			log.Warn(note)
		}
		if err := rl.load(ctx); err != nil {
			validate := "throttlekit validate " + c.policyDir
			if c.policyTree {
				validate = "throttlekit validate --policy-tree " + c.policyDir
			}
			return fmt.Errorf("no valid policy in %s; fix the errors above (`%s` lists them)", c.policyDir, validate)
		}
	}

	tracer, stopTracing, err := c.tracing.Start(ctx, log) // internal/telemetry
	if err != nil {
		return fmt.Errorf("--tracing: %w", err)
	}
	defer func() {
		// Flush the spans still buffered, within the drain timeout.
		fctx, cancel := context.WithTimeout(context.Background(), c.drainTimeout)
		defer cancel()
		if err := stopTracing(fctx); err != nil {
			log.Warn("tracing: spans not flushed at shutdown", "err", err)
		}
	}()
	var tlsFiles *certs.Source // TLS on the listeners (tlsflags.go, internal/certs)
	if c.tls.enabled() {
		if tlsFiles, err = certs.Load(c.tls.Files, log); err != nil {
			err = c.namedErr(err, "--grpc-tls-cert", "--grpc-tls-key", "--grpc-tls-client-ca", "--grpc-tls-client-san")
			return err
		}
		log.Info("gRPC over TLS", "cert", c.tls.CertFile, "client_ca", c.tls.ClientCAFile, "client_san", c.tls.ClientSAN, "http_too", c.tls.httpToo)
	}
	grpcLis, err := net.Listen("tcp", c.grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr %s: %w", c.grpcAddr, err)
	}
	httpLis, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("--http-addr %s: %w", c.httpAddr, err)
	}
	metricsLis, err := listenMetrics(c.metricsAddr, m) // PROMETHEUS_ADDR (metricslistener.go)
	if err != nil {
		grpcLis.Close()
		httpLis.Close()
		return err
	}
	rls := envoyrls.NewRateLimitServer(eng, envoyrls.Options{Headers: c.responseHeaders, Tracer: tracer})
	opts := append(m.serverOptions(log.Error), c.grpc.options()...)
	if tlsFiles != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsFiles.GRPCConfig())))
		if c.tls.httpToo {
			httpLis = tls.NewListener(httpLis, tlsFiles.HTTPConfig())
		}
	}
	// After the metrics interceptor: shed calls are counted by code.
	opts = append(opts, grpc.ChainUnaryInterceptor(newShedder(c.grpc.maxInflight, m.reg).interceptor()))
	gs := grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(gs, rls)
	extprocv3.RegisterExternalProcessorServer(gs, envoyrls.NewProcessorServer(eng, envoyrls.ProcessorOptions{Observe: m.observeGate, Tracer: tracer, Costs: eng, Logger: log}))
	quota, err := newQuotaServer(c, eng, m, log) // nil without --rlqs
	if err != nil {
		return err
	}
	if quota != nil {
		rlqspb.RegisterRateLimitQuotaServiceServer(gs, quota)
	}
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	hs.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	var jsonClient clientCheck
	if tlsFiles != nil && tlsFiles.MutualTLS() {
		jsonClient = tlsFiles.Client
	}
	mux := newHTTPMux(eng, rls, m, readiness{store: probe.ready, needsStore: c.readyNeedsStore}, c.storeTimeout, jsonClient)
	healthcheck := newUpstreamHealth(c, func() bool { return eng.Policy().Hash != "" }, probe.ready)
	mux.Handle("GET /healthcheck", healthcheck) // envoyproxy/ratelimit's (upstream_health.go)
	httpSrv := newHTTPServer(mux)

	errc := make(chan error, 4)
	go func() { errc <- gs.Serve(grpcLis) }()
	go func() {
		if err := httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go metricsLis.serve(errc)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if ping != nil {
		go probe.run(watchCtx, c.storeProbeInterval)
	}
	// Where policy sets come from (pkg/source): the directory, or an xDS
	// server (not ready until its first push, unless
	// --force-start-without-policy).
	var src source.Source = rl.dirSource()
	if xds != nil {
		src = xds
	}
	go func() {
		if err := src.Run(watchCtx, rl.apply); err != nil {
			log.Error("policy watcher stopped: changes will not be reloaded", "dir", c.policyDir, "error", err)
		}
	}()
	from := c.policyDir
	if c.xds.enabled() {
		from = "xds " + c.xds.url // the directory is not read
	}
	log.Info("serving", "grpc", grpcLis.Addr().String(), "http", httpLis.Addr().String(), "metrics", metricsLis.addr(), "policy", from)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight calls", "timeout", c.drainTimeout)
	case runErr = <-errc:
		log.Error("server failed", "error", runErr)
	}
	stopWatch()
	hs.Shutdown()
	healthcheck.stopping.Store(true)
	if quota != nil {
		quota.Shutdown() // RLQS streams last as long as their Envoy: end them, so the drain does not wait for them
	}
	drained := make(chan struct{})
	go func() { gs.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(c.drainTimeout):
		log.Warn("drain timeout: cancelling the calls still running")
		gs.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.drainTimeout)
	defer cancel()
	_ = httpSrv.Shutdown(sctx)
	metricsLis.shutdown(sctx)
	if quota != nil {
		if err := quota.Close(sctx); err != nil {
			log.Warn("rlqs: store calls still running at shutdown", "error", err)
		}
	}
	if err := eng.Close(sctx); err != nil {
		log.Warn("returning leased credits", "error", err)
	}
	log.Info("stopped")
	return runErr
}

// engineOptions is the engine c configures over store, with fed's regions
// for federated rules (none when fed is nil) and fleet's coordinators for
// distributed gates: serve's, and validate's (whose parts hold no
// connection), so that validate refuses what serve refuses.
func engineOptions(c *serveConfig, store gale.Store, fed *federationParts, fleet *fleetParts, log *slog.Logger) engine.Options {
	o := engine.Options{Store: store, Shadow: c.shadow, StoreTimeout: c.storeTimeout, Logger: log, MessageTimeout: c.messageTimeout, MaxKeys: c.maxKeys,
		Distributed: fleet.node, UpstreamHits: c.upstreamMetrics}
	if fed != nil {
		o.Federation = fed.rule
	}
	return o
}

// newHTTPServer is the HTTP listener's server. Every phase of a request is
// bounded: a slow body, or a client that stops reading, cannot hold a
// connection (and its goroutine) for long.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
}

// newQuotaServer is the Rate Limit Quota Service over eng with --rlqs (nil
// without), its metrics registered with m; the rules it would refuse are
// logged by name.
func newQuotaServer(c *serveConfig, eng *engine.Engine, m *metrics, log *slog.Logger) (*rlqsserver.Server, error) {
	if !c.rlqs.enabled {
		return nil, nil
	}
	opts := c.rlqs.options()
	opts.Resolver, opts.Logger, opts.Member = eng, log, rlqsMember(c.nodeID, c.grpcAddr)
	quota, err := rlqsserver.New(opts)
	if err != nil {
		return nil, fmt.Errorf("--rlqs: %w", err)
	}
	m.reg.MustRegister(telemetry.RLQSCollector{Stats: quota.Stats})
	for _, err := range eng.QuotaRefusals() {
		log.Warn("rlqs: buckets matching this rule are answered DENY_ALL", "err", err)
	}
	log.Info("rlqs: serving the rate limit quota service", "guard", c.rlqs.guard)
	return quota, nil
}
