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

// clientCheck says whether an HTTP request comes from a client the gRPC
// listener would accept (certs.Source.Client); nil accepts every one.
type clientCheck func(*tls.ConnectionState) error

func newHTTPMux(e *engine.Engine, rls *envoyrls.RateLimitServer, m *metrics, ping pinger, timeout time.Duration, client clientCheck) *http.ServeMux {
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
		if ping != nil {
			ctx, cancel := context.WithTimeout(r.Context(), max(timeout, 100*time.Millisecond))
			err := ping(ctx)
			cancel()
			if err != nil {
				http.Error(w, "not ready: store unreachable: "+err.Error(), http.StatusServiceUnavailable)
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
