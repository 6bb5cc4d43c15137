package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFirstTenMinutes runs the README's "First ten minutes" commands as
// written, with bash, from the repository root, and checks that a newcomer
// sees what the README says: OVER_LIMIT, a reload, a broken file refused with
// the last good policy kept, and a gate's rejection.
func TestFirstTenMinutes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a session of commands")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := firstTenMinutes(t, string(readme))
	// The session serves on the default ports: another server there would
	// answer its probes instead.
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8081"} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s is in use: the README's session serves there; stop what listens on it", addr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	// On a timeout, end the whole session: serve and the held probe run in
	// the background of bash, whose EXIT trap a kill would skip.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	log, _ := os.ReadFile(filepath.Join(tmp, "tk.log"))
	if err != nil {
		t.Fatalf("the commands failed: %v\n%s\nserve's log:\n%s", err, out, log)
	}
	for _, want := range []string{
		"OVER_LIMIT: descriptor path=/login, limit login: 5 per minute, remaining 0",
		"exit 3",
		"policy error",
		"^",
		"rejected by gate checkout: 503, concurrency limit 1 reached",
		"exit 3\n",
	} {
		if !strings.Contains(string(out)+string(log), want) {
			t.Errorf("the session never shows %q:\n%s\nserve's log:\n%s", want, out, log)
		}
	}
	if !strings.Contains(string(log), "keeping the previous policy") {
		t.Errorf("serve's log does not say the last good policy was kept:\n%s", log)
	}
}

// firstTenMinutes returns the shell block between the README's
// first-ten-minutes markers.
func firstTenMinutes(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "<!-- first-ten-minutes:start -->")
	block, _, ok2 := strings.Cut(rest, "<!-- first-ten-minutes:end -->")
	if !ok || !ok2 {
		t.Fatal("README.md has no first-ten-minutes block")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	return strings.TrimSuffix(block, "```")
}
