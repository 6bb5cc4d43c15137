package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	root, err := findModuleRoot()
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
	binPath = filepath.Join(dir, "throttlekit")
	args := []string{"build"}
	if raceBuild {
		args = append(args, "-race")
	}
	args = append(args, "-o", binPath, "./cmd/sidecar")
	build := exec.Command("go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: `go %s` in %s failed (%v); no end-to-end test can run without the binary:\n%s", strings.Join(args, " "), root, err, out)
		return 1
	}
	return m.Run()
}

// findModuleRoot is the directory of the go.mod this package belongs to.
func findModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module (got %q)", gomod)
	}
	return filepath.Dir(gomod), nil
}
