package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
)

// pinger is what readiness asks of the store; nil for the memory store.
type pinger func(ctx context.Context) error

func newHTTPMux(e *engine.Engine, rls *envoyrls.RateLimitServer, m *metrics, ping pinger, timeout time.Duration) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if e.Policy().Hash == "" {
			http.Error(w, "not ready: no policy loaded", http.StatusServiceUnavailable)
			return
		}
		if ping != nil {
			ctx, cancel := context.WithTimeout(r.Context(), max(timeout, 100*time.Millisecond))
			err := ping(ctx)
			cancel()
			if err != nil {
				m.storeReachable.Set(0)
				http.Error(w, "not ready: store unreachable: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		m.storeReachable.Set(1)
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /debug/policy", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(e.Policy())
	})
	mux.Handle("/json", envoyrls.JSONHandler(rls))
	return mux
}
