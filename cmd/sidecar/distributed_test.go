package main

import (
	"context"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

const fleetPolicy = `
concurrency:
  - name: backend
    match: {path_prefix: /}
    controller: aimd
    min_limit: 10
    max_limit: 10
    initial_limit: 10
    distributed: {coordinator: redis, heartbeat: 100ms}
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
