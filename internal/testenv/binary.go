package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot is the directory of the go.mod the calling test's package
// belongs to.
func ModuleRoot() (string, error) {
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

// BuildSidecar builds the throttlekit binary (cmd/sidecar of the module
// rooted at root) into dir, with the race detector when race is set, and
// returns its path. The error carries the compiler's output.
func BuildSidecar(root, dir string, race bool) (string, error) {
	bin := filepath.Join(dir, "throttlekit")
	args := []string{"build"}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "-o", bin, "./cmd/sidecar")
	build := exec.Command("go", args...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("`go %s` in %s failed (%v):\n%s", strings.Join(args, " "), root, err, out)
	}
	return bin, nil
}
