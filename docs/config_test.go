package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/sim"
)

// validateFlags are the flags a policy directory the documents name needs
// to load, as the documents give them.
var validateFlags = map[string][]string{
	"config/federation": {"--store", "redis", "--redis-url", "redis://eu-redis:6379/0",
		"--region", "eu-west-1", "--federation-url", "redis://global-redis:6379/0"},
}

// TestDocConfigFiles: every file under config/ the documents name loads:
// a policy file or directory through `throttlekit validate` (with the flags
// the documents give it), a scenario through the simulator's loader.
// config/compat/ holds rejected samples on purpose; TestCompatSamples
// checks it.
func TestDocConfigFiles(t *testing.T) {
	dirs := map[string]string{}
	for path, where := range namedPaths(t) {
		if !strings.HasPrefix(path, "config/") || strings.HasPrefix(path, "config/compat/") || hypothetical[path] != "" {
			continue
		}
		full := filepath.Join(moduleRoot, path)
		st, err := os.Stat(full)
		if err != nil {
			continue // TestDocNamedPathsExist reports it
		}
		switch {
		case strings.HasPrefix(path, "config/scenarios/"):
			if !st.IsDir() && strings.HasSuffix(path, ".yaml") {
				if _, err := sim.Load(full); err != nil {
					t.Errorf("%s names %s, which does not load as a scenario: %v", where, path, err)
				}
			}
		case st.IsDir():
			dirs[strings.TrimSuffix(path, "/")] = where
		case strings.HasSuffix(path, ".yaml"):
			dirs[filepath.Dir(path)] = where
		}
	}
	if len(dirs) < 2 {
		t.Fatalf("only %d policy directories named: is the pattern still right? %v", len(dirs), dirs)
	}
	for _, dir := range sortedKeys(dirs) {
		args := append([]string{"validate"}, validateFlags[dir]...)
		cmd := exec.Command(binPath, append(args, dir)...)
		cmd.Dir = moduleRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s names a policy in %s; `throttlekit %s %s` refuses it: %v\n%s", dirs[dir], dir, strings.Join(args, " "), dir, err, out)
		}
	}
}
