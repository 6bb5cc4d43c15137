package source_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/internal/xdstest"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/source"
)

var bg = context.Background()

// limitConfig is a RateLimitConfig of one domain with one key-only rule of
// n requests per minute.
func limitConfig(name, domain, key string, n uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key:       key,
		RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

// harness runs an XDS source into a real engine (in-memory store) and
// records what it applied and refused.
type harness struct {
	eng      *engine.Engine
	mu       sync.Mutex
	applied  []*policy.Set
	rejected []error
	logs     *testenv.Buffer
	done     chan error
}

func startSource(t *testing.T, opts source.XDSOptions) *harness {
	t.Helper()
	eng, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{eng: eng, logs: &testenv.Buffer{}, done: make(chan error, 1)}
	opts.Logger = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.OnReject = func(err error) {
		h.mu.Lock()
		h.rejected = append(h.rejected, err)
		h.mu.Unlock()
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = 20 * time.Millisecond
	}
	src, err := source.NewXDS(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	go func() {
		h.done <- src.Run(ctx, func(ctx context.Context, set *policy.Set) error {
			if err := eng.Load(ctx, set); err != nil {
				return err
			}
			h.mu.Lock()
			h.applied = append(h.applied, set)
			h.mu.Unlock()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = eng.Close(bg)
	})
	return h
}

// limitOf is the requests_per_unit the engine applies to one request of
// domain with entry key=value.
func (h *harness) limitOf(t *testing.T, domain, key string) uint32 {
	t.Helper()
	resp, err := h.eng.Decide(bg, &engine.Request{Domain: domain, Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: key, Value: "v"}}}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Statuses[0].Limit == nil {
		return 0
	}
	return resp.Statuses[0].Limit.RequestsPerUnit
}

func (h *harness) appliedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.applied)
}

func (h *harness) rejectedErrs() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.rejected...)
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testenv.Eventually(cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestXDSPushUpdateNack: the first push is applied and ACKed, an update
// replaces it, a bad push is NACKed with the error (naming the resource and
// the field) while the last good policy stays, and a good push after it is
// applied again.
func TestXDSPushUpdateNack(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	srv.Push("node-a", "v1", limitConfig("edge-limits", "edge", "remote_address", 2))
	h := startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "node-a"})

	wait(t, "the first push applied and ACKed", func() bool { return h.appliedCount() == 1 && srv.Acked("v1") })
	if got := h.limitOf(t, "edge", "remote_address"); got != 2 {
		t.Fatalf("after v1 the limit is %d, want 2", got)
	}
	if f := h.eng.Policy().Domains[0].File; f != "xds:RateLimitConfig/edge-limits" {
		t.Errorf("domain file %q, want the resource's name", f)
	}

	srv.Push("node-a", "v2", limitConfig("edge-limits", "edge", "remote_address", 5), limitConfig("api-limits", "api", "user", 7))
	wait(t, "the update applied and ACKed", func() bool { return h.appliedCount() == 2 && srv.Acked("v2") })
	if got := h.limitOf(t, "edge", "remote_address"); got != 5 {
		t.Fatalf("after v2 the limit is %d, want 5", got)
	}
	if got := h.limitOf(t, "api", "user"); got != 7 {
		t.Fatalf("after v2 api's limit is %d, want 7", got)
	}
	good := h.eng.Policy().Hash

	bad := limitConfig("api-limits", "api", "user", 7)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	srv.Push("node-a", "v3", limitConfig("edge-limits", "edge", "remote_address", 9), bad)
	wait(t, "the bad push NACKed", func() bool { return len(srv.Nacks()) > 0 })
	nack := srv.Nacks()[0]
	for _, want := range []string{`RateLimitConfig "api-limits"`, "descriptors[0].rate_limit.unit", "UNKNOWN"} {
		if !strings.Contains(nack, want) {
			t.Errorf("NACK detail %q does not name %q", nack, want)
		}
	}
	if srv.Acked("v3") {
		t.Error("v3 was ACKed")
	}
	if h.eng.Policy().Hash != good || h.limitOf(t, "edge", "remote_address") != 5 {
		t.Fatal("a NACKed push changed the policy in use")
	}
	// The control plane resends a NACKed snapshot at once, and the source
	// answers each resend (no faster than RetryInterval): OnReject is called
	// once or more, each time for this push's error.
	rejected := h.rejectedErrs()
	if len(rejected) == 0 {
		t.Error("OnReject was not called for the bad push")
	}
	for _, err := range rejected {
		if !strings.Contains(err.Error(), "api-limits") || !strings.Contains(err.Error(), "UNKNOWN") {
			t.Errorf("OnReject got %v, want the bad push's error", err)
		}
	}

	// A policy error (found by pkg/policy, not the converter) is NACKed too.
	dup := limitConfig("edge-limits", "edge", "remote_address", 9)
	dup.Descriptors = append(dup.Descriptors, dup.Descriptors[0])
	srv.Push("node-a", "v4", dup)
	wait(t, "the duplicate-rule push NACKed", func() bool {
		for _, n := range srv.Nacks() {
			if strings.Contains(n, "xds:RateLimitConfig/edge-limits") && strings.Contains(n, "descriptors[1]") {
				return true
			}
		}
		return false
	})

	srv.Push("node-a", "v5", limitConfig("edge-limits", "edge", "remote_address", 11))
	wait(t, "the push after the NACKs applied", func() bool { return srv.Acked("v5") })
	if got := h.limitOf(t, "edge", "remote_address"); got != 11 {
		t.Fatalf("after v5 the limit is %d, want 11", got)
	}
}

// TestXDSEngineRefusalIsNacked: a set pkg/policy accepts but Apply refuses
// (the engine has no federation for mode: federated) is NACKed with
// Apply's error.
func TestXDSEngineRefusalIsNacked(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    mode: federated\n")
	srv := xdstest.Start(t, xdstest.Options{})
	srv.Push("n", "v1", limitConfig("edge-limits", "edge", "remote_address", 2))
	h := startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "n", OverlayDir: dir})
	wait(t, "the NACK", func() bool { return len(srv.Nacks()) > 0 })
	if !strings.Contains(srv.Nacks()[0], "federat") {
		t.Errorf("NACK %q does not carry the engine's refusal", srv.Nacks()[0])
	}
	if h.appliedCount() != 0 || h.eng.Policy().Hash != "" {
		t.Fatal("a refused push was applied")
	}
}

// TestXDSResentNackIsPaced: go-control-plane resends a NACKed snapshot at
// once; the source answers the resends no faster than its retry interval.
func TestXDSResentNackIsPaced(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	bad := limitConfig("edge-limits", "edge", "remote_address", 2)
	bad.Descriptors[0].RateLimit.Unit = 42
	srv.Push("n", "v1", bad)
	start := time.Now()
	startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "n", RetryInterval: 100 * time.Millisecond})
	wait(t, "three NACKs", func() bool { return len(srv.Nacks()) >= 3 })
	// The first NACK is at once, each resend waits ≥ 50ms (jitter-free
	// pacing: the full interval).
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("3 NACKs in %v: resends are not paced", el)
	}
	if !strings.Contains(srv.Nacks()[0], "42 is not a unit") {
		t.Errorf("NACK %q", srv.Nacks()[0])
	}
}

// TestXDSRestartReconnect: the source starts before the server, waits for
// it, and after the server dies redials until a new one on the same
// address answers, and takes its push.
func TestXDSRestartReconnect(t *testing.T) {
	first := xdstest.Start(t, xdstest.Options{})
	addr := first.Addr
	first.Stop() // nothing listens yet
	h := startSource(t, source.XDSOptions{Target: addr, NodeID: "n", MaxRetryInterval: 100 * time.Millisecond})
	wait(t, "a failed dial logged", func() bool { return strings.Contains(h.logs.String(), "reconnecting") })

	srv := xdstest.Start(t, xdstest.Options{Addr: addr})
	srv.Push("n", "v1", limitConfig("edge-limits", "edge", "remote_address", 3))
	wait(t, "v1 applied once the server is up", func() bool { return srv.Acked("v1") && h.appliedCount() == 1 })

	srv.Stop()
	restarted := xdstest.Start(t, xdstest.Options{Addr: addr})
	restarted.Push("n", "r1", limitConfig("edge-limits", "edge", "remote_address", 4))
	wait(t, "the restarted server's push applied", func() bool { return restarted.Acked("r1") })
	if got := h.limitOf(t, "edge", "remote_address"); got != 4 {
		t.Fatalf("after the restart the limit is %d, want 4", got)
	}
}

// TestXDSStalledServerIsLeft (issue 32, item 3): a management server that
// stalls — the connection open, nothing flowing either way — is left once
// a keepalive ping goes unanswered, and the client reconnects; it used to
// wait on the stream until TCP gave up (minutes to hours). A push after
// the stall heals is applied.
func TestXDSStalledServerIsLeft(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{PermitPings: true})
	proxy := testenv.StartProxy(t, srv.Addr)
	// gRPC pings no more often than every 10 s, whatever is asked.
	h := startSource(t, source.XDSOptions{Target: proxy.Addr, NodeID: "n", Keepalive: 10 * time.Second, KeepaliveTimeout: 500 * time.Millisecond,
		MaxRetryInterval: 100 * time.Millisecond})
	srv.Push("n", "v1", limitConfig("edge-limits", "edge", "remote_address", 3))
	wait(t, "v1 applied", func() bool { return h.appliedCount() == 1 })
	before := strings.Count(h.logs.String(), "reconnecting")
	proxy.Blackhole("upstream")
	proxy.Blackhole("downstream")
	left := time.Now().Add(40 * time.Second) // a ping's 10 s and its timeout, on a loaded machine
	for strings.Count(h.logs.String(), "reconnecting") == before {
		if time.Now().After(left) {
			t.Fatalf("the stalled stream was not left in 40 s:\n%s", h.logs.String())
		}
		<-time.After(50 * time.Millisecond) // polling a condition with a deadline
	}
	proxy.Heal()
	srv.Push("n", "v2", limitConfig("edge-limits", "edge", "remote_address", 4))
	wait(t, "v2 applied after the stall", func() bool { return h.limitOf(t, "edge", "remote_address") == 4 })
}

// TestXDSNodeAndHeaders: the node id and metadata reach the server in the
// request, the additional headers as the stream's metadata.
func TestXDSNodeAndHeaders(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	srv.Push("node-z", "v1", limitConfig("e", "edge", "k", 1))
	startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "node-z",
		NodeMetadata: map[string]string{"cluster": "rl", "zone": "eu"},
		Headers:      map[string]string{"x-tenant": "blue"}})
	wait(t, "v1 ACKed", func() bool { return srv.Acked("v1") })
	r := srv.Requests()[0]
	md := r.GetNode().GetMetadata().GetFields()
	if r.GetNode().GetId() != "node-z" || md["cluster"].GetStringValue() != "rl" || md["zone"].GetStringValue() != "eu" {
		t.Errorf("node %v", r.GetNode())
	}
	if r.GetTypeUrl() != source.RateLimitConfigType {
		t.Errorf("type %q", r.GetTypeUrl())
	}
	if got := srv.StreamMetadata()[0].Get("x-tenant"); len(got) != 1 || got[0] != "blue" {
		t.Errorf("stream metadata x-tenant = %v, want [blue]", got)
	}
}

// TestXDSOverlayChangeReappliesTheLastPush: editing the overlay applies
// the last push again with it, without a new push; a bad overlay edit is
// refused and the policy stays.
func TestXDSOverlayChangeReappliesTheLastPush(t *testing.T) {
	dir := t.TempDir()
	srv := xdstest.Start(t, xdstest.Options{})
	srv.Push("n", "v1", limitConfig("edge-limits", "edge", "remote_address", 2))
	h := startSource(t, source.XDSOptions{Target: srv.Addr, NodeID: "n", OverlayDir: dir, OverlayDebounce: time.Millisecond})
	wait(t, "v1 applied", func() bool { return h.appliedCount() == 1 })
	if m := h.eng.Policy().Domains[0].Descriptors[0].Mode; m == policy.Leased {
		t.Fatal("leased before the overlay said so")
	}
	writeFile(t, dir, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    mode: leased\n")
	wait(t, "the overlay applied", func() bool { return h.eng.Policy().Domains[0].Descriptors[0].Mode == policy.Leased })
	good := h.eng.Policy().Hash

	writeFile(t, dir, "edge.yaml", "domain: edge\ndescriptors:\n  - key: remote_address\n    mode: turbo\n")
	wait(t, "the bad overlay refused", func() bool { return len(h.rejectedErrs()) > 0 })
	if h.eng.Policy().Hash != good {
		t.Fatal("a bad overlay edit changed the policy in use")
	}
	if len(srv.Nacks()) != 0 {
		t.Errorf("an overlay edit NACKed the server's push: %q", srv.Nacks())
	}
}
