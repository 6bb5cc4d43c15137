package rlqsserver_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// The engine is what cmd/sidecar wires into the server.
var _ ratelimit.QuotaResolver = (*engine.Engine)(nil)

// TestServerDependsOnNoEngineInternals: the server speaks protobuf in and
// package ratelimit out (and pkg/rlqs's machine, which needs gale's
// grant and return types); neither the engine nor the policy is among its
// dependencies.
func TestServerDependsOnNoEngineInternals(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/pkg/engine", "/pkg/policy", "/pkg/gale/memstore", "/pkg/gale/redisstore"} {
			if strings.HasSuffix(dep, banned) || strings.Contains(dep, banned+"/") {
				t.Errorf("pkg/rlqsserver depends on %s: speak to the engine through package ratelimit", dep)
			}
		}
	}
}
