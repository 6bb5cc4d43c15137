package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// metricsListener is the listener of its own that --metrics-addr opens
// (envoyproxy/ratelimit's PROMETHEUS_ADDR with USE_PROMETHEUS=true; Envoy
// Gateway's rate-limit pods are scraped there, on :19001): plain HTTP,
// GET /metrics alone, the same registry as /metrics on --http-addr. The
// nil *metricsListener is none: its methods do nothing.
type metricsListener struct {
	lis net.Listener
	srv *http.Server
}

// listenMetrics listens on addr for m's /metrics; "" is no listener (nil).
func listenMetrics(addr string, m *metrics) (*metricsListener, error) {
	if addr == "" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(m))
	return &metricsListener{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}, nil
}

// addr is where it listens; "" for none.
func (l *metricsListener) addr() string {
	if l == nil {
		return ""
	}
	return l.lis.Addr().String()
}

// serve serves until shutdown; a failure before that goes to errc.
func (l *metricsListener) serve(errc chan<- error) {
	if l == nil {
		return
	}
	if err := l.srv.Serve(l.lis); !errors.Is(err, http.ErrServerClosed) {
		errc <- err
	}
}

// shutdown stops serving, letting scrapes in progress finish within ctx.
func (l *metricsListener) shutdown(ctx context.Context) {
	if l != nil {
		_ = l.srv.Shutdown(ctx)
	}
}
