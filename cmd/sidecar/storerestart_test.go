package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestStoreRestartIsCountedLoggedAndKept: Redis restarted empty under a
// serving sidecar. throttlekit_store_restarts_total counts it, one warning
// says what it costs, and a strict rule's key the sidecar had been denied
// stays denied (the new server would admit it: it forgot the count); a key
// it was never denied is asked of the new server.
func TestStoreRestartIsCountedLoggedAndKept(t *testing.T) {
	r := testenv.StartRedis(t)
	s := startServeWith(t, "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 3}\n",
		// storeDeadline: ask retries an error, and a check that missed
		// 50ms on a loaded machine may have counted in Redis all the
		// same, so its retry counted twice (OVER_LIMIT at the third
		// request). The restart is still noticed at once: the old
		// server's connections end with it.
		append([]string{"--store", "redis", "--redis-url", r.URL()}, storeDeadline...), map[string]string{"THROTTLEKIT_STORE_PROBE_INTERVAL": "20ms"})
	if s.grpcAddr == "" {
		t.Fatalf("serve did not start (exit %d)", s.code)
	}
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	// ask answers a request of user, once the store does (a connection
	// that died with the old server fails the first call on it).
	ask := func(user string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		var code rlsv3.RateLimitResponse_Code
		if !testenv.Eventually(func() bool {
			resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
			code = resp.GetOverallCode()
			return err == nil
		}) {
			t.Fatalf("no answer for %s within 10s", user)
		}
		return code
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask("a"); got != want {
			t.Fatalf("request %d of a: %v, want %v", i+1, got, want)
		}
	}
	if got := s.gauge(t, "throttlekit_store_restarts_total"); got != 0 {
		t.Fatalf("throttlekit_store_restarts_total %v before any restart", got)
	}
	r.Restart()
	if !testenv.Eventually(func() bool { return s.gauge(t, "throttlekit_store_restarts_total") == 1 }) {
		t.Fatalf("throttlekit_store_restarts_total %v, want 1 within 10s of the restart", s.gauge(t, "throttlekit_store_restarts_total"))
	}
	if got := ask("a"); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a, denied before the restart, after it: %v, want OVER_LIMIT until its window ends", got)
	}
	if got := ask("b"); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("b, never denied, after the restart: %v, want OK", got)
	}
	var restarts []map[string]any
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l["msg"].(string), "store restarted") {
			restarts = append(restarts, l)
		}
	}
	if len(restarts) != 1 || restarts[0]["level"] != "WARN" || restarts[0]["server"] != r.Addr || restarts[0]["appendonly"] != false {
		t.Errorf("restart logged as %v; want one warning naming %s, appendonly false", restarts, r.Addr)
	}
	// The section the warning points to is where it says (it named the
	// README, which no longer has it).
	faults, err := os.ReadFile("../../docs/faults.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(restarts) == 1 && (!strings.Contains(restarts[0]["msg"].(string), "(docs/faults.md: Store restarts)") || !strings.Contains(string(faults), "\n## Store restarts\n")) {
		t.Errorf("the warning points to %q; want docs/faults.md's Store restarts section, which exists", restarts[0]["msg"])
	}
}

// watchedStore is the store serve builds on url, with its restart watch.
func watchedStore(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	w := newRestartWatch(slog.New(slog.NewTextHandler(io.Discard, nil)))
	client, err := newRedisClient(url, 500*time.Millisecond, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s, err := redisstore.New(client, redisstore.Options{ServerTime: true, Timeout: 2 * time.Second, Watch: w})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestRestartWatchOnClusterAndSentinel: serve's client finds no restart
// where there is none — a Cluster's primaries are three servers, a
// Sentinel-managed client also connects to the sentinels — and one where a
// Sentinel promotes a replica (a new server, which may lack counts).
func TestRestartWatchOnClusterAndSentinel(t *testing.T) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: time.Hour}
	checkAll := func(s *redisstore.Store) error {
		for k := range 64 { // keys on every primary
			if _, err := s.Check(context.Background(), fmt.Sprint("k", k), rule, 1, time.Now()); err != nil {
				return err
			}
		}
		return nil
	}
	t.Run("cluster", func(t *testing.T) {
		s := watchedStore(t, testenv.StartCluster(t, 3).URL())
		if err := checkAll(s); err != nil {
			t.Fatal(err)
		}
		if n := s.Forgot(); n != 0 {
			t.Fatalf("%d restarts counted on a Cluster that never restarted", n)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		sen := testenv.StartSentinel(t)
		s := watchedStore(t, sen.URL())
		if err := checkAll(s); err != nil {
			t.Fatal(err)
		}
		if n := s.Forgot(); n != 0 {
			t.Fatalf("%d restarts counted before any failover", n)
		}
		sen.KillPrimary()
		sen.WaitFailover(20 * time.Second)
		if !testenv.Eventually(func() bool { return checkAll(s) == nil }) {
			t.Fatal("no check answered within 10s of the failover")
		}
		if n := s.Forgot(); n != 1 {
			t.Fatalf("%d restarts counted after one failover, want 1", n)
		}
	})
}
