package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// Set by TestMain: the throttlekit binary every test starts, and the module
// root its example policies (config/*.yaml) are copied from.
var (
	binPath    string
	moduleRoot string
)

// TestMain builds cmd/sidecar once for the whole package. A build failure
// stops every test with the compiler's output: no test here means anything
// without the binary.
func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	root, err := testenv.ModuleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	moduleRoot = root
	dir, err := os.MkdirTemp("", "throttlekit-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir for the binary:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if binPath, err = testenv.BuildSidecar(root, dir, raceBuild); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\nno end-to-end test can run without the binary\n", err)
		return 1
	}
	return m.Run()
}
