package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// fleetPolicy is a distributed gate of 10 beating every 100 ms. Its lease
// is 5 s, not the default two heartbeats: these tests judge counts (what a
// fleet admits, whose record Redis holds), and a loaded machine stalls a
// sidecar past 200 ms now and then, which fences it (it admits nothing)
// until it beats again. Fencing is the distributed package's to test, on
// its fake clock.
const fleetPolicy = `
concurrency:
  - name: backend
    match: {path_prefix: /}
    controller: aimd
    min_limit: 10
    max_limit: 10
    initial_limit: 10
    distributed: {coordinator: redis, heartbeat: 100ms, lease_ttl: 5s}
`

// fleetGauge is the gate's value of a fleet metric on s, -1 without one.
func (s *sidecar) fleetGauge(t *testing.T, name string) float64 {
	t.Helper()
	for _, m := range s.scrape(t) {
		if m.name == name && m.labels["gate"] == "backend" {
			return m.value
		}
	}
	return -1
}

// hold opens an ext_proc stream and sends request headers as Envoy does,
// and reports whether the request was let through; the stream stays open
// (the request in flight) until ctx ends.
func hold(t *testing.T, ctx context.Context, c extprocv3.ExternalProcessorClient) bool {
	t.Helper()
	s, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/x")}, {Key: ":authority", RawValue: []byte("svc")}}}}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetImmediateResponse() == nil
}

// TestServeDistributedGate: two sidecars with one distributed gate over
// one Redis split its ceiling of 10: requests held in flight on both admit
// 10 in all, not 10 each; the fleet metrics say so; and a sidecar without
// a coordinator refuses the gate at load, saying which flag it needs.
func TestServeDistributedGate(t *testing.T) {
	rdb := testenv.StartRedis(t)
	url := "redis://" + rdb.Addr + "/0"
	var sidecars []*sidecar
	for _, id := range []string{"a", "b"} {
		sidecars = append(sidecars, startServeWith(t, fleetPolicy, []string{"--store", "redis", "--redis-url", url, "--node-id", id}, nil))
	}
	for _, s := range sidecars {
		if s.grpcAddr == "" {
			t.Fatalf("a sidecar did not serve:\n%s", s.stderr.String())
		}
	}
	if !testenv.Eventually(func() bool {
		for _, s := range sidecars {
			if s.fleetGauge(t, "throttlekit_gate_fleet_sidecars") != 2 || s.fleetGauge(t, "throttlekit_gate_fleet_ceiling") != 5 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the sidecars did not settle at 5 of 10 each: a %v/%v, b %v/%v",
			sidecars[0].fleetGauge(t, "throttlekit_gate_fleet_ceiling"), sidecars[0].fleetGauge(t, "throttlekit_gate_fleet_global_limit"),
			sidecars[1].fleetGauge(t, "throttlekit_gate_fleet_ceiling"), sidecars[1].fleetGauge(t, "throttlekit_gate_fleet_global_limit"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admitted := 0
	for _, s := range sidecars {
		conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := extprocv3.NewExternalProcessorClient(conn)
		for range 8 {
			if hold(t, ctx, c) {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("two sidecars admitted %d requests in flight, want the fleet's one ceiling, 10", admitted)
	}

	lone := startServeWith(t, fleetPolicy, []string{"--node-id", "c"}, nil)
	if lone.grpcAddr != "" || !strings.Contains(lone.stderr.String(), "coordinator: redis needs serve --store redis --redis-url") {
		t.Fatalf("a sidecar without Redis: served %q; log:\n%s", lone.grpcAddr, lone.stderr.String())
	}
}

// TestServeDuplicateNodeIDNotReady: a second sidecar started with a live
// one's --node-id is refused by the coordinator and admits nothing of the
// fleet's; its /readyz says so, naming the gate and the fix, and
// throttlekit_gate_fleet_duplicate is 1; the first stays ready at 0.
func TestServeDuplicateNodeIDNotReady(t *testing.T) {
	rdb := testenv.StartRedis(t)
	args := []string{"--store", "redis", "--redis-url", "redis://" + rdb.Addr + "/0", "--node-id", "a"}
	first := startServeWith(t, fleetPolicy, args, nil)
	if first.grpcAddr == "" {
		t.Fatalf("the first sidecar did not serve:\n%s", first.stderr.String())
	}
	if !testenv.Eventually(func() bool { return first.fleetGauge(t, "throttlekit_gate_fleet_ceiling") == 10 }) {
		t.Fatalf("the first sidecar's ceiling %v, want 10 alone", first.fleetGauge(t, "throttlekit_gate_fleet_ceiling"))
	}
	second := startServeWith(t, fleetPolicy, args, nil)
	if second.grpcAddr == "" {
		t.Fatalf("the second sidecar did not serve:\n%s", second.stderr.String())
	}
	if !testenv.Eventually(func() bool { code, _ := second.get(t, "/readyz"); return code == http.StatusServiceUnavailable }) {
		code, body := second.get(t, "/readyz")
		t.Fatalf("the duplicate's /readyz: %d %q, want 503; log:\n%s", code, body, second.stderr.String())
	}
	if _, body := second.get(t, "/readyz"); !strings.Contains(body, "backend") || !strings.Contains(body, "give each sidecar its own --node-id") {
		t.Fatalf("the duplicate's /readyz says %q: want the gate and the fix", body)
	}
	if got := second.fleetGauge(t, "throttlekit_gate_fleet_duplicate"); got != 1 {
		t.Fatalf("the duplicate's throttlekit_gate_fleet_duplicate %v, want 1", got)
	}
	if code, body := first.get(t, "/readyz"); code != http.StatusOK {
		t.Fatalf("the first sidecar's /readyz: %d %q, want 200", code, body)
	}
	if got := first.fleetGauge(t, "throttlekit_gate_fleet_duplicate"); got != 0 {
		t.Fatalf("the first sidecar's throttlekit_gate_fleet_duplicate %v, want 0", got)
	}
}

// TestServeReloadKeepsTheGateInItsFleet: editing a distributed gate's
// policy file while serving keeps the sidecar's record in Redis (the same
// instance beats on, its seq growing) and the gate ready: no heartbeat is
// refused as another live sidecar with this --node-id. Dropping the gate
// takes the record out of Redis.
func TestServeReloadKeepsTheGateInItsFleet(t *testing.T) {
	rdb := testenv.StartRedis(t)
	// The test reads records; it does not time Redis.
	coord, err := rediscoord.New(rdb.Client(), rediscoord.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "t.yaml")
	if err := os.WriteFile(file, []byte(fleetPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := runServe(t, []string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json",
		"--drain-timeout", "2s", "--reload-debounce", "10ms", "--store", "redis", "--redis-url", rdb.URL(), "--node-id", "a"}, func(string) string { return "" })
	if s.grpcAddr == "" {
		t.Fatalf("serve did not start:\n%s", s.stderr.String())
	}
	record := func() distributed.Record {
		recs, err := coord.Records(context.Background(), "backend")
		if err != nil {
			t.Fatalf("reading the gate's records: %v", err)
		}
		if len(recs) != 1 {
			return distributed.Record{}
		}
		return recs[0]
	}
	if !testenv.Eventually(func() bool { return record().Seq >= 2 }) {
		t.Fatalf("no record beating in Redis: %+v", record())
	}
	before := record()

	edited := strings.Replace(fleetPolicy, "min_limit: 10", "min_limit: 5", 1)
	testenv.WriteFileAtomic(t, file, []byte(edited)) // whole: the watcher never reads half of it
	if !testenv.Eventually(func() bool { return len(logRecords(t, s.stderr.String(), "policy loaded")) == 2 }) {
		t.Fatalf("the edit was not reloaded:\n%s", s.stderr.String())
	}
	// Five heartbeats after the reload, more than the lease (two).
	var after distributed.Record
	if !testenv.Eventually(func() bool { after = record(); return after.Instance != before.Instance || after.Seq >= before.Seq+5 }) {
		t.Fatalf("the record after the edit: %+v (before %+v)", after, before)
	}
	if after.Instance != before.Instance {
		t.Fatalf("the edit put another instance's record in Redis: %+v, was %+v", after, before)
	}
	if strings.Contains(s.stderr.String(), "another live sidecar has this --node-id") {
		t.Fatalf("a heartbeat after the edit was refused as a duplicate:\n%s", s.stderr.String())
	}
	if code, body := s.get(t, "/readyz"); code != http.StatusOK || s.fleetGauge(t, "throttlekit_gate_fleet_ceiling") != 10 {
		t.Fatalf("after the edit: /readyz %d %q, ceiling %v; want ready at 10", code, body, s.fleetGauge(t, "throttlekit_gate_fleet_ceiling"))
	}

	testenv.WriteFileAtomic(t, file, []byte(strings.Replace(edited, "distributed:", "# distributed:", 1)))
	if !testenv.Eventually(func() bool { return len(logRecords(t, s.stderr.String(), "policy loaded")) == 3 }) {
		t.Fatalf("the dropped gate was not reloaded:\n%s", s.stderr.String())
	}
	if recs, err := coord.Records(context.Background(), "backend"); err != nil || len(recs) != 0 {
		t.Fatalf("records %+v, %v once the gate is local, want none", recs, err)
	}
}
