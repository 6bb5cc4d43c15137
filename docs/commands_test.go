package docs

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A block's language says whether this package runs it.
const (
	langRun   = "sh"      // run by TestDocCommands (or TestFirstTenMinutes)
	langShown = "console" // commands shown only: the line above says why
)

// shownOnly is the comment a console block must sit under, saying why it
// is not run.
var shownOnly = regexp.MustCompile(`^<!-- not run: .+ -->$`)

// knownLangs are the fences a document may use; a fence without one is
// refused, so no command block escapes the choice between sh and console.
var knownLangs = map[string]bool{langRun: true, langShown: true, "text": true, "yaml": true, "json": true}

// TestDocCommands runs every sh block of the documents (but the first ten
// minutes, TestFirstTenMinutes's) with bash -e, each in a fresh temporary
// directory holding bin/throttlekit (not on PATH) and a copy of config/;
// it checks that every other block is console (with the reason it is not
// run above it), text or data, that the tests a console block's `go test
// -run` names exist, and that the make targets any block names exist.
func TestDocCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the documents' command blocks")
	}
	var run []block
	for _, f := range documents(t) {
		for _, b := range readDocument(t, f).blocks {
			switch {
			case !knownLangs[b.lang]:
				t.Errorf("%s: a block fenced %q: fence it sh (run by this test), console (shown only, under <!-- not run: why -->), text (output) or yaml", b.where(), "```"+b.lang)
			case b.lang == langShown && !shownOnly.MatchString(b.before):
				t.Errorf("%s: a console block not run must say why on the line above it, as <!-- not run: needs Docker -->; or fence it sh to have it run", b.where())
			}
			if b.lang == langRun || b.lang == langShown {
				checkMakeTargets(t, b)
				checkGoTestNames(t, b)
			}
			if b.lang == langRun && !b.firstTenMinutes {
				run = append(run, b)
			}
		}
	}
	if len(run) < 4 {
		t.Fatalf("only %d sh blocks found to run", len(run))
	}
	requireDefaultPortsFree(t)
	for _, b := range run {
		t.Run(strings.ReplaceAll(b.where(), "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(binPath, filepath.Join(dir, "bin", "throttlekit")); err != nil {
				t.Fatal(err)
			}
			if err := os.CopyFS(filepath.Join(dir, "config"), os.DirFS(filepath.Join(moduleRoot, "config"))); err != nil {
				t.Fatal(err)
			}
			// bin/ is not put on PATH: a reader's checkout has bin/throttlekit
			// there, not on PATH, and a block must say bin/throttlekit (the
			// Envoy Gateway block ran `throttlekit`, which only passed here).
			env := append(os.Environ(), "TMPDIR="+dir)
			if out, err := runSession(t, dir, env, b.text, 2*time.Minute); err != nil {
				t.Fatalf("%s: the block failed: %v\n%s", b.where(), err, out)
			}
		})
	}
}

// runSession runs script with bash -e in dir and returns what it printed.
// On the deadline the whole session ends: serve and probes run in bash's
// background, whose EXIT trap a kill would skip.
func runSession(t *testing.T, dir string, env []string, script string, limit time.Duration) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// defaultPortsLock is the file whose lock a test holds while its sessions
// serve on serve's default addresses: a second make test on the machine
// (CI beside a developer's run) runs the same sessions, and without turns
// one's serve found the ports taken and its probes were answered by the
// other's (TestDocCommands's docs/policy.md block waited 2 minutes for a
// reload its own serve, never started, could not log).
var defaultPortsLock = filepath.Join(os.TempDir(), "throttlekit-default-ports.lock")

// requireDefaultPortsFree takes the default ports for the test: it waits
// for its turn on defaultPortsLock (released when the test ends), saying
// how long it waited, then fails when something else listens where the
// documents' sessions serve (serve's default addresses): its answers would
// be taken for theirs.
func requireDefaultPortsFree(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(defaultPortsLock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("the default ports' lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
	began := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("locking %s: %v", defaultPortsLock, err)
	}
	if waited := time.Since(began); waited > time.Second {
		t.Logf("waited %v for another test run's sessions to leave the default ports (%s)", waited.Round(time.Second), defaultPortsLock)
	}
	for _, addr := range []string{"127.0.0.1:8080", "127.0.0.1:8081"} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Fatalf("%s is in use: the documents' sessions serve there; stop what listens on it", addr)
		}
	}
}

var (
	makeTarget = regexp.MustCompile(`(?m)(?:^|[;&|(]\s*|#\s*or:\s*)make ([a-z][a-z0-9-]*)`)
	goTestRun  = regexp.MustCompile(`go test [^\n]*?-run '?([^' ]+)'? [^\n]*?(\./[^\s]+)`)
)

// checkMakeTargets: every `make TARGET` a block runs is a target of the
// Makefile.
func checkMakeTargets(t *testing.T, b block) {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(moduleRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range makeTarget.FindAllStringSubmatch(b.text, -1) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).Match(mk) {
			t.Errorf("%s: `make %s`: the Makefile has no such target", b.where(), m[1])
		}
	}
}

// checkGoTestNames: every test a block's `go test -run` names exists in the
// package it names (run by make test, so the block stays true).
func checkGoTestNames(t *testing.T, b block) {
	t.Helper()
	for _, m := range goTestRun.FindAllStringSubmatch(b.text, -1) {
		pkg := m[2]
		recursive := strings.HasSuffix(pkg, "/...")
		dir := filepath.Join(moduleRoot, strings.TrimSuffix(pkg, "/..."))
		for _, name := range strings.Split(m[1], "|") {
			name = strings.Trim(strings.SplitN(name, "/", 2)[0], "^$")
			if !testExists(dir, name, recursive) {
				t.Errorf("%s: `go test -run %s %s`: no test matching %s there", b.where(), m[1], pkg, name)
			}
		}
	}
}

func testExists(dir, name string, recursive bool) bool {
	re := regexp.MustCompile(`(?m)^func (Test|Benchmark)\w*` + regexp.QuoteMeta(strings.TrimPrefix(strings.TrimPrefix(name, "Test"), "Benchmark")) + `\w*\(`)
	found := false
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.IsDir() && path != dir && !recursive {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			src, _ := os.ReadFile(path)
			found = re.Match(src)
		}
		return nil
	})
	return found
}

// TestFirstTenMinutes runs the README's "First ten minutes" commands as
// written, with bash, from the module root (they build bin/throttlekit with
// make), and checks that a newcomer sees what the README says: OVER_LIMIT, a
// reload, a broken file refused with the last good policy kept, and a
// gate's rejection. The session's files go to a fresh directory under the
// test's TMPDIR.
func TestFirstTenMinutes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs a session of commands")
	}
	var script string
	for _, b := range readDocument(t, "README.md").blocks {
		if b.firstTenMinutes {
			script = b.text
		}
	}
	if script == "" {
		t.Fatal("README.md has no sh block between the first-ten-minutes markers")
	}
	requireDefaultPortsFree(t)
	tmp := t.TempDir()
	out, err := runSession(t, moduleRoot, append(os.Environ(), "TMPDIR="+tmp), script, 3*time.Minute)
	logs, _ := filepath.Glob(filepath.Join(tmp, "*", "serve.log"))
	var log []byte
	if len(logs) == 1 {
		log, _ = os.ReadFile(logs[0])
	}
	if err != nil {
		t.Fatalf("the commands failed: %v\n%s\nserve's log:\n%s", err, out, log)
	}
	if len(logs) != 1 {
		t.Fatalf("want serve's log in one fresh directory under TMPDIR, found %q", logs)
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
