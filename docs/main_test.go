// Package docs holds the tests that keep README.md, docs/*.md and
// deploy/README.md true: every sh block is run, every console block says
// why it is not, every relative link and anchor resolves, every config/,
// deploy/ and envoy/ path named exists, and every policy file named loads.
package docs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Set by TestMain: the module root the documents are read from, and the
// throttlekit binary the sh blocks run.
var (
	moduleRoot string
	binPath    string
)

// TestMain builds cmd/sidecar once for the package: no command block means
// anything without the binary.
func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		fmt.Fprintf(os.Stderr, "docs: go env GOMOD: not inside a module (%q, %v)\n", gomod, err)
		return 1
	}
	moduleRoot = filepath.Dir(gomod)
	dir, err := os.MkdirTemp("", "throttlekit-docs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs: temp dir for the binary:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "throttlekit")
	build := exec.Command("go", "build", "-o", binPath, "./cmd/sidecar")
	build.Dir = moduleRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "docs: `go build ./cmd/sidecar` in %s failed (%v); the command blocks need the binary:\n%s", moduleRoot, err, out)
		return 1
	}
	return m.Run()
}
