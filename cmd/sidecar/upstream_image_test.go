package main

import (
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPrecedenceOfDefaults: the command line, then THROTTLEKIT_*, then
// envoyproxy/ratelimit's variables, then THROTTLEKIT_DEFAULT_*, then the
// flag's own default.
func TestPrecedenceOfDefaults(t *testing.T) {
	e := map[string]string{"THROTTLEKIT_DEFAULT_GRPC_ADDR": "0.0.0.0:1", "THROTTLEKIT_DEFAULT_HTTP_ADDR": "0.0.0.0:2",
		"THROTTLEKIT_DEFAULT_POLICY": "/image", "THROTTLEKIT_DEFAULT_STORE_TIMEOUT": "75ms"}
	c := parseUpstream(t, nil, e)
	if c.grpcAddr != "0.0.0.0:1" || c.httpAddr != "0.0.0.0:2" || c.policyDir != "/image" || c.storeTimeout != 75*time.Millisecond {
		t.Errorf("THROTTLEKIT_DEFAULT_* alone not applied: %s %s %s %v", c.grpcAddr, c.httpAddr, c.policyDir, c.storeTimeout)
	}
	e["PORT"], e["THROTTLEKIT_GRPC_ADDR"] = "9090", "127.0.0.1:5"
	c = parseUpstream(t, []string{"--policy", "/flag"}, e)
	if c.httpAddr != "127.0.0.1:9090" || c.grpcAddr != "127.0.0.1:5" || c.policyDir != "/flag" {
		t.Errorf("THROTTLEKIT_DEFAULT_* won: %s %s %s", c.httpAddr, c.grpcAddr, c.policyDir)
	}
	if _, err := parseServe(nil, env(map[string]string{"THROTTLEKIT_DEFAULT_STORE_TIMEOUT": "soon"}), io.Discard); err == nil ||
		!strings.Contains(err.Error(), `THROTTLEKIT_DEFAULT_STORE_TIMEOUT="soon"`) {
		t.Errorf("a bad default: %v", err)
	}
}

// dockerfileEnv is the environment the Dockerfile's ENV instructions set.
func dockerfileEnv(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENV ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
	}
	return out
}

// TestImageDefaultsGiveWayToUpstream: the image's own environment, under
// the variables an upstream manifest sets and run as /bin/ratelimit,
// serves what the manifest says; alone, it listens on all interfaces with
// the example policies; a manifest's THROTTLEKIT_* wins over it.
func TestImageDefaultsGiveWayToUpstream(t *testing.T) {
	image := dockerfileEnv(t)
	if len(image) == 0 {
		t.Fatal("no ENV in the Dockerfile")
	}
	with := func(extra map[string]string) map[string]string {
		e := map[string]string{}
		for k, v := range image {
			e[k] = v
		}
		for k, v := range extra {
			e[k] = v
		}
		return e
	}
	c := parseUpstream(t, nil, image)
	if c.grpcAddr != "0.0.0.0:8081" || c.httpAddr != "0.0.0.0:8080" || c.policyDir != "/etc/throttlekit/policy" {
		t.Errorf("the image alone: %s %s %s", c.grpcAddr, c.httpAddr, c.policyDir)
	}
	c = parseUpstream(t, commandLine([]string{"/bin/ratelimit"})[1:], with(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "GRPC_PORT": "9091", "USE_STATSD": "false"}))
	if c.policyDir != "/data/ratelimit/config" || c.grpcAddr != "0.0.0.0:9091" {
		t.Errorf("an upstream manifest lost to the image's environment: policy %s, gRPC %s", c.policyDir, c.grpcAddr)
	}
	c = parseUpstream(t, nil, with(map[string]string{"THROTTLEKIT_GRPC_ADDR": "127.0.0.1:8081"}))
	if c.grpcAddr != "127.0.0.1:8081" {
		t.Errorf("THROTTLEKIT_GRPC_ADDR lost to the image's environment: %s", c.grpcAddr)
	}
}
