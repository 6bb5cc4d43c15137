package e2e

import (
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttlekit/throttlekit/internal/rlqsenvoy"
	"github.com/throttlekit/throttlekit/internal/testenv"
)

// TestE2ERLQSSlowStoreStillAssigns (issue 41, item 2): with every Redis
// reply 400 ms late, serve --rlqs still assigns its Envoy a token bucket.
// RLQS leases are on no request's path; they shared the requests' store
// (a 200 ms round trip, a 500 ms read timeout), so each lease was
// abandoned while it still ran in Redis, its units lost to the window:
// under CPU load one 50 ms timeout at a window's start cost the window,
// a 3 s Redis pause across a boundary admitted 0 of 400. Leases now go
// through a pool of their own bounded by --rlqs-store-timeout (5 s).
func TestE2ERLQSSlowStoreStillAssigns(t *testing.T) {
	r := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, r.Addr)
	s := startSidecar(t, options{store: "redis", redisURL: "redis://" + proxy.Addr + "/0", args: rlqsServeArgs,
		files: map[string]string{"rlqs.yaml": rlqsPolicy()}})
	proxy.Latency("downstream", 400*time.Millisecond)

	var mu sync.Mutex
	var tokens []uint32
	got := make(chan struct{}, 1)
	denyAll := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	f, err := rlqsenvoy.New(rlqsenvoy.Config{
		Domain:       rlqsDomain,
		Servers:      []string{s.grpcAddr},
		NoAssignment: denyAll,
		// Opening a stream is not what this test judges: a loaded machine
		// (make test beside a second one, under -race) may take more than
		// the emulator's default second, and each failed open drops that
		// tick's report, as Envoy does.
		OpenTimeout: testenv.StoreDeadline,
		OnResponse: func(_ time.Time, _ int, resp *rlqsv3.RateLimitQuotaResponse) {
			for _, a := range resp.GetBucketAction() {
				if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
					mu.Lock()
					tokens = append(tokens, tb.GetMaxTokens())
					mu.Unlock()
					select {
					case got <- struct{}{}:
					default:
					}
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	asked := time.Now()
	if f.Decide(map[string]string{"tenant": "acme"}) {
		t.Fatal("the first request was admitted under DENY_ALL")
	}
	// Alone it comes in about 2 s; a loaded machine may also drop the
	// immediate report while the stream opens (Envoy does), and the first
	// report then comes at the 5 s tick. Three windows: the old main
	// assigned nothing in any, every lease abandoned.
	select {
	case <-got:
	case <-time.After(3 * rlqsWindow):
		// What each side saw, for the failure's reader: the Envoy's
		// reports and streams, the sidecar's streams, reports and leases.
		m := s.metrics(t)
		t.Fatalf("no token bucket within three windows (%v) of the subscription, each Redis reply 400 ms late; lease warnings: %v; the Envoy: %+v; the sidecar: streams open %v, requests reported %v, units leased %v, store calls %v, load average %s",
			3*rlqsWindow, s.log.Records("rlqs: lease failed; the next window or report asks again"), f.Stats(),
			m.get("throttlekit_rlqs_streams_open"), m.get("throttlekit_rlqs_reported_requests_total", "verdict", "denied"),
			m.get("throttlekit_rlqs_leased_units_total"), m.get("throttlekit_store_calls_total", "op", "lease"), testenv.LoadAverage())
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("assigned %v, %v after the subscription", tokens, time.Since(asked).Round(time.Millisecond))
	if tokens[0] < 1 {
		t.Errorf("assigned %d tokens", tokens[0])
	}
	if !f.Decide(map[string]string{"tenant": "acme"}) {
		t.Error("a request after the assignment was denied")
	}
}
