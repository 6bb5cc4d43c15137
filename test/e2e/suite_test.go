package e2e

import (
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// TestE2EMemory runs the suite on the in-memory store.
func TestE2EMemory(t *testing.T) {
	t.Parallel()
	runSuite(t, "memory")
}

// TestE2ERedis runs the suite on a real redis-server, plus the scenarios
// only a shared store has: Redis dying, stalling and coming back.
func TestE2ERedis(t *testing.T) {
	t.Parallel()
	runSuite(t, "redis")
}

// runSuite runs every scenario against sidecars on store. The scenarios
// that only read answers share one sidecar (each on descriptor values of
// its own); those that change the process — its policy files, its Redis,
// its life — start their own.
func runSuite(t *testing.T, store string) {
	base := options{store: store}
	if store == "redis" {
		base.redisURL = testenv.StartRedis(t).URL()
	}
	// The shared sidecar's scenarios and the reload judge answers, not
	// the store's deadline: a Redis call a loaded machine makes slower
	// than the default 50 ms must not turn into on_store_error's answer.
	// The outage cases measure that deadline and keep it.
	unmeasured := base
	unmeasured.args = []string{"--store-timeout", slackStoreTimeout.String()}
	withHeaders := unmeasured
	withHeaders.headers = true
	shared := startSidecar(t, withHeaders)

	for _, sc := range []struct {
		name string
		run  func(*testing.T, *sidecar)
	}{
		{"statuses", testStatuses},
		{"response_headers", testResponseHeaders},
		{"nested_descriptors", testNested},
		{"wildcard_values", testWildcards},
		{"hits_addend", testHitsAddend},
		{"shadow_mode", testShadowMode},
		{"replaces", testReplaces},
		{"several_limits", testSeveralLimits},
		{"charge_counts_when_denied", testChargeCountsWhenDenied},
		{"denial_consumes_nothing", testDenialConsumesNothing},
		{"example_policies", testExamplePolicies},
		{"invalid_requests", testInvalidRequests},
		{"metrics", testMetrics},
		{"json_endpoint", testJSONEndpoint},
		{"grpc_health", testGRPCHealth},
	} {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, shared) })
	}

	t.Run("hot_reload", func(t *testing.T) { testHotReload(t, startSidecar(t, unmeasured)) })
	if store == "redis" {
		t.Run("redis_outage", func(t *testing.T) { testRedisOutage(t, base) })
		t.Run("redis_stall", func(t *testing.T) { testRedisStall(t, base) })
	}
	t.Run("sigterm_drain", func(t *testing.T) { testSigtermDrain(t, base) })
}
