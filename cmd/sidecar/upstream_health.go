package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// upstreamHealth answers GET /healthcheck as envoyproxy/ratelimit does
// (Envoy Gateway's startup, readiness and liveness probes ask it): 200
// with the body "OK" when healthy, 500 with no body otherwise. Healthy
// means not shutting down and, when asked for, a policy loaded
// (--healthcheck-needs-policy, upstream's
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) and the store answering
// (--healthcheck-needs-store, upstream's
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION). Without them a Redis outage does
// not fail it, as upstream's does not: a liveness probe must not restart
// every replica because Redis is down. /readyz is throttlekit's stricter
// answer. Safe for concurrent use.
type upstreamHealth struct {
	stopping atomic.Bool   // set when serve starts draining
	policy   func() bool   // nil: no policy needed
	store    pinger        // nil: the store is not asked
	timeout  time.Duration // the store's answer is awaited this long
}

func (h *upstreamHealth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	healthy := !h.stopping.Load() && (h.policy == nil || h.policy())
	if healthy && h.store != nil {
		ctx, cancel := context.WithTimeout(r.Context(), max(h.timeout, 100*time.Millisecond))
		healthy = h.store(ctx) == nil
		cancel()
	}
	if !healthy {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("OK"))
}

// newUpstreamHealth is /healthcheck for c: hasPolicy says whether a policy
// is loaded, store is the store probe's latest answer.
func newUpstreamHealth(c *serveConfig, hasPolicy func() bool, store pinger) *upstreamHealth {
	h := &upstreamHealth{timeout: c.storeTimeout}
	if c.healthcheckPolicy {
		h.policy = hasPolicy
	}
	if c.healthcheckStore {
		h.store = store
	}
	return h
}
