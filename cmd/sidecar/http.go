package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
)

// pinger is what readiness asks of the store: serve passes the store
// probe's latest answer, which also drives throttlekit_store_up.
type pinger func(ctx context.Context) error

// readiness is what /readyz asks beyond a policy and the fleet: the
// store's latest answer, which fails readiness only with needsStore
// (--ready-needs-store). Otherwise ready means "can answer": in a store
// outage each rule answers by its own failure mode, and a sidecar's
// readiness, which counts toward its application pod's, must not take the
// application out of its Service (10 flaps of 1–3 s in 17 minutes were
// seen on a loaded node, each a 50 ms probe missed).
type readiness struct {
	store      pinger // nil: the store is this process's own
	needsStore bool
}

// clientCheck says whether an HTTP request comes from a client the gRPC
// listener would accept (certs.Source.Client); nil accepts every one.
type clientCheck func(*tls.ConnectionState) error

func newHTTPMux(e *engine.Engine, rls *envoyrls.RateLimitServer, m *metrics, ready readiness, timeout time.Duration, client clientCheck) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(m))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if e.Policy().Hash == "" {
			http.Error(w, "not ready: no policy loaded", http.StatusServiceUnavailable)
			return
		}
		if err := fleetReady(e, time.Now()); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if ready.store != nil {
			ctx, cancel := context.WithTimeout(r.Context(), max(timeout, 100*time.Millisecond))
			err := ready.store(ctx)
			cancel()
			switch {
			case err != nil && ready.needsStore:
				http.Error(w, "not ready: store unreachable: "+err.Error(), http.StatusServiceUnavailable)
				return
			case err != nil:
				_, _ = fmt.Fprintf(w, "ready; store unreachable: %v: each rule answers by its failure mode (on_store_error, failure_mode_deny) until it is back (throttlekit_store_up 0; --ready-needs-store makes this not ready)\n", err)
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /debug/policy", func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		if err := writePolicyView(&b, e); err != nil {
			http.Error(w, "cannot show the policy: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
		_, _ = w.Write(b.Bytes())
	})
	// /json spends (and, with is_negative_hits, gives back) any tenant's
	// budget: where the gRPC listener requires a client certificate, so
	// does /json.
	json := envoyrls.JSONHandler(rls)
	mux.HandleFunc("/json", func(w http.ResponseWriter, r *http.Request) {
		if client != nil {
			if err := client(r.TLS); err != nil {
				http.Error(w, "forbidden: /json answers ShouldRateLimit: "+err.Error()+" (serve the HTTP listener over TLS with --http-tls, or call the gRPC listener)", http.StatusForbidden)
				return
			}
		}
		json.ServeHTTP(w, r)
	})
	return mux
}

// fleetReady is an error naming each distributed gate whose node the
// coordinator refuses as a duplicate at now: that gate admits nothing of
// the fleet's until the sidecar has a --node-id of its own.
func fleetReady(e *engine.Engine, now time.Time) error {
	var dup []string
	id := ""
	for _, s := range e.NodeStats(now) {
		if s.Duplicate {
			dup, id = append(dup, s.Gate), s.Node
		}
	}
	if len(dup) == 0 {
		return nil
	}
	return fmt.Errorf("distributed gate %s: the coordinator refuses this sidecar as a duplicate: another live sidecar has --node-id %q; give each sidecar its own --node-id",
		strings.Join(dup, ", "), id)
}

// metricsHandler serves m's registry in Prometheus's exposition format.
func metricsHandler(m *metrics) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}
