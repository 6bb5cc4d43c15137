package envoyrls_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
)

// The engine is what cmd/sidecar wires into the adapters.
var (
	_ envoyrls.Decider      = (*engine.Engine)(nil)
	_ envoyrls.GateChooser  = (*engine.Engine)(nil)
	_ envoyrls.CostReserver = (*engine.Engine)(nil)
)

// TestAdapterDependsOnNoEngineInternals: the adapters speak protobuf in and
// package ratelimit out; neither the engine, the policy nor the limiters
// are among their (transitive) dependencies.
func TestAdapterDependsOnNoEngineInternals(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"/pkg/engine", "/pkg/policy", "/pkg/gale"} {
			if strings.HasSuffix(dep, banned) || strings.Contains(dep, banned+"/") {
				t.Errorf("pkg/envoyrls depends on %s: speak to the engine through package ratelimit", dep)
			}
		}
	}
}
