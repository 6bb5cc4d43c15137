// Package docs holds the tests that keep README.md, docs/*.md and
// deploy/README.md true: every sh block is run, every console block says
// why it is not, every relative link and anchor resolves, every config/,
// deploy/ and envoy/ path named exists, and every policy file named loads.
package docs

import (
	"fmt"
	"os"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
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
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		return 1
	}
	moduleRoot = root
	dir, err := os.MkdirTemp("", "throttlekit-docs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs: temp dir for the binary:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binPath, err = testenv.BuildSidecar(root, dir, false); err != nil {
		fmt.Fprintf(os.Stderr, "docs: %v\nthe command blocks need the binary\n", err)
		return 1
	}
	return m.Run()
}
