package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// buildDir holds the binaries the tests build; TestMain removes it.
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "throttlekit-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy: temp dir for the binary:", err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// throttlekitBinary builds cmd/sidecar (once per test binary) and returns
// its path. Only the tests that run it pay for the build.
func throttlekitBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() { binPath, buildErr = testenv.BuildSidecar("..", buildDir, false) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// usageFlag is a flag's line in the flag package's usage: "  -name type".
var usageFlag = regexp.MustCompile(`(?m)^  -([a-z0-9][a-z0-9-]*)`)

// serveFlags returns the flag names `throttlekit serve -h` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(throttlekitBinary(t), "serve", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("throttlekit serve -h: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range usageFlag.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["grpc-addr"] || !flags["http-addr"] || !flags["policy"] {
		t.Fatalf("throttlekit serve -h lists %d flags, not --grpc-addr, --http-addr and --policy: is the usage format new?\n%s", len(flags), out)
	}
	return flags
}

// envFlag returns the flag a THROTTLEKIT_* variable is the twin of
// (THROTTLEKIT_GRPC_ADDR → grpc-addr), or "" for any other name.
func envFlag(name string) string {
	rest, ok := strings.CutPrefix(name, "THROTTLEKIT_")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
}

// served is a running `throttlekit serve`.
type served struct {
	grpcAddr, httpAddr string
	out                *testenv.Buffer
}

// startProcess starts cmd with its output in the returned buffer; exited is
// closed once it has exited. Cleanup kills it and waits for it; a failed
// test logs its output under name.
func startProcess(t *testing.T, cmd *exec.Cmd, name string) (out *testenv.Buffer, exited <-chan struct{}) {
	t.Helper()
	out = &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return out, done
}

// startServe starts `throttlekit serve` with exactly env and args, waits for
// its "serving" log line (the process must log JSON) and returns the
// addresses it bound. Cleanup kills it; a failed test logs its output.
func startServe(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	cmd := exec.Command(throttlekitBinary(t), append([]string{"serve"}, args...)...)
	cmd.Env = env
	out, exited := startProcess(t, cmd, fmt.Sprintf("throttlekit serve %v (env %v)", args, env))
	s := &served{out: out}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if g, h, ok := servingLine(s.out.String()); ok {
			s.grpcAddr, s.httpAddr = g, h
			return s
		}
		select {
		case <-exited:
			t.Fatalf("throttlekit serve exited before serving:\n%s", s.out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("throttlekit serve logged no JSON \"serving\" line within 20s:\n%s", s.out.String())
		}
	}
}

// servingLine finds the JSON "serving" line in a process's output.
func servingLine(out string) (grpcAddr, httpAddr string, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l struct{ Msg, GRPC, HTTP string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "serving" {
			return l.GRPC, l.HTTP, true
		}
	}
	return "", "", false
}
