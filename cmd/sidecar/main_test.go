package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// memoryStore returns e with THROTTLEKIT_STORE=memory when it names no
// store: a process envoyproxy/ratelimit's variables configure must say
// where it counts (upstream would count in Redis; serve refuses to fall
// back to per-process counters), and these tests count in memory.
func memoryStore(e map[string]string) map[string]string {
	if e["REDIS_URL"] != "" || e["THROTTLEKIT_STORE"] != "" {
		return e
	}
	out := map[string]string{"THROTTLEKIT_STORE": "memory"}
	for k, v := range e {
		out[k] = v
	}
	return out
}

func TestFlagsEnvironmentTwinsAndPrecedence(t *testing.T) {
	var stderr bytes.Buffer
	c, err := parseServe([]string{"--grpc-addr", "127.0.0.1:9999"}, env(map[string]string{
		"THROTTLEKIT_GRPC_ADDR":        "0.0.0.0:1",
		"THROTTLEKIT_STORE":            "redis",
		"THROTTLEKIT_STORE_TIMEOUT":    "75ms",
		"THROTTLEKIT_RESPONSE_HEADERS": "true",
	}), &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if c.grpcAddr != "127.0.0.1:9999" {
		t.Errorf("flag lost to its environment twin: %s", c.grpcAddr)
	}
	if c.store != "redis" || c.storeTimeout != 75*time.Millisecond || !c.responseHeaders {
		t.Errorf("environment twins not applied: %+v", c)
	}
	if c.httpAddr != "127.0.0.1:8080" || c.policyDir != "./config" {
		t.Errorf("defaults: %+v", c)
	}
	// Port 0 (a free port each) on both listeners is not a clash.
	if _, err := parseServe([]string{"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, env(nil), &stderr); err != nil {
		t.Errorf("two :0 listeners refused: %v", err)
	}
	if _, err := parseServe([]string{"--grpc-addr", "127.0.0.1:9", "--http-addr", "127.0.0.1:9"}, env(nil), &stderr); err == nil {
		t.Error("one fixed port for both listeners accepted")
	}
}

func TestBadFlagsSayWhatToFix(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--store", "etcd"}, nil, `--store "etcd": want memory or redis`},
		{[]string{"--log-format", "xml"}, nil, "want text or json"},
		{[]string{"--grpc-addr", "8081"}, nil, "want host:port"},
		{[]string{"--store-timeout", "0s"}, nil, "must be positive"},
		{nil, map[string]string{"THROTTLEKIT_STORE_TIMEOUT": "soon"}, `THROTTLEKIT_STORE_TIMEOUT="soon"`},
		{[]string{"config"}, nil, "did you mean --policy config"},
		{[]string{"--grpc-max-inflight", "-1"}, nil, "--grpc-max-inflight -1: must be ≥ 0"},
		{[]string{"--grpc-max-concurrent-streams", "0"}, nil, "--grpc-max-concurrent-streams 0: want 1 to"},
		{[]string{"--grpc-keepalive-min-time", "0s"}, nil, "--grpc-keepalive-min-time must be positive"},
		{[]string{"--grpc-max-connection-age", "-1s"}, nil, "--grpc-max-connection-age -1s: must be ≥ 0"},
		{[]string{"--redis-wait-replicas", "-1"}, nil, "--redis-wait-replicas -1: must be ≥ 0"},
		{[]string{"--redis-wait-replicas", "1"}, nil, "--redis-wait-replicas 1: needs --store redis"},
		{[]string{"--max-keys", "0"}, nil, "--max-keys 0: want 1 to 16777216"},
	} {
		var stderr bytes.Buffer
		_, err := parseServe(tc.args, env(tc.env), &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want it to mention %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestRedisURLsAndRedaction(t *testing.T) {
	for _, ok := range []string{
		"redis://127.0.0.1:6379/0",
		"rediss://:pw@cache.internal:6380/1",
		"redis://:pw@sentinel-a:26379/0?master_name=mymaster&addr=sentinel-b:26379",
		"redis+cluster://:pw@node-a:6379?addr=node-b:6379",
	} {
		c, err := newRedisClient(ok, 50*time.Millisecond, nil, nil)
		if err != nil {
			t.Errorf("%s: %v", ok, err)
			continue
		}
		c.Close()
	}
	for _, bad := range []string{"http://secret@x", "redis://:hunter2@h:6379/0?bogus=1", "redis://:hunter2@%zz"} {
		_, err := newRedisClient(bad, time.Second, nil, nil)
		if err == nil {
			t.Errorf("%s accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
	if got := Redact("redis://user:hunter2@h:6379/0"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact kept the password: %s", got)
	}
}

func TestValidateCommand(t *testing.T) {
	good := t.TempDir()
	bad := t.TempDir()
	os.WriteFile(filepath.Join(good, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "b.yaml"), []byte("domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: secnd, requests_per_unit: 5}\n  - key: j\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: gcra, burst: 50}\n"), 0o644)
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"validate", good}, env(nil), &out, &errs); code != 0 || !strings.Contains(out.String(), "OK") {
		t.Fatalf("good dir: exit %d, %s %s", code, out.String(), errs.String())
	}
	out.Reset()
	code := run(context.Background(), []string{"validate", bad}, env(nil), &out, &errs)
	if code != 1 {
		t.Fatalf("bad dir: exit %d", code)
	}
	if !strings.Contains(errs.String(), "b.yaml:4: descriptors[0].rate_limit.unit: unknown unit \"secnd\"") {
		t.Fatalf("unit error not reported as file:line: field: message:\n%s", errs.String())
	}
	if code := run(context.Background(), []string{"frobnicate"}, env(nil), &out, &errs); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
}

func TestSimulateCommand(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"simulate", "--scenario", filepath.Join(t.TempDir(), "missing.yaml"), "--out", t.TempDir()}, env(nil), &out, &errs); code == 0 {
		t.Fatalf("a missing scenario succeeded: %s", out.String())
	}
	if !strings.Contains(errs.String(), "missing.yaml") {
		t.Fatalf("the error does not name the scenario: %s", errs.String())
	}
	dir := t.TempDir()
	code := run(context.Background(), []string{"simulate", "--scenario", "../../config/scenarios/capacity-drop.yaml", "--out", dir}, env(nil), &out, &errs)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, f := range []string{"capacity-drop.png", "capacity-drop.svg", "capacity-drop-p95.csv"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

// runCLI runs the binary's entry point with args and no environment.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = run(context.Background(), args, env(nil), &out, &errs)
	return code, out.String(), errs.String()
}

// TestTopLevelUsageListsTheSubcommands: --help, -h and help print the
// binary's own usage, listing every subcommand, not serve's flags.
func TestTopLevelUsageListsTheSubcommands(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, errs := runCLI(args...)
		if code != 0 {
			t.Errorf("%v: exit %d, want 0 (stderr %q)", args, code, errs)
		}
		for _, cmd := range []string{"serve", "validate", "simulate", "probe", "version"} {
			if !strings.Contains(out, "\n  "+cmd+" ") {
				t.Errorf("%v: the usage does not list %s:\n%s", args, cmd, out)
			}
		}
		if strings.Contains(out+errs, "-store-timeout") {
			t.Errorf("%v: the top-level usage shows serve's flags:\n%s%s", args, out, errs)
		}
	}
	code, _, errs := runCLI("frobnicate")
	if code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) || !strings.Contains(errs, "\n  probe ") {
		t.Errorf("unknown command: exit %d, stderr:\n%s", code, errs)
	}
}

// TestEverySubcommandHasHelp: `CMD --help` and `help CMD` print CMD's usage
// and exit 0; validate does not take --help for a directory.
func TestEverySubcommandHasHelp(t *testing.T) {
	for _, cmd := range []string{"serve", "validate", "simulate", "probe", "version"} {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			code, out, errs := runCLI(args...)
			if code != 0 || !strings.Contains(out+errs, "usage: throttlekit "+cmd) {
				t.Errorf("%v: exit %d, output:\n%s%s\nwant exit 0 and \"usage: throttlekit %s\"", args, code, out, errs, cmd)
			}
			if strings.Contains(out+errs, "cannot read") {
				t.Errorf("%v: took --help for a directory:\n%s", args, errs)
			}
		}
	}
}

// TestDurationFlagsSayHowToWriteADuration: a duration without a unit is an
// error that shows how to write one, on one line, without the usage.
func TestDurationFlagsSayHowToWriteADuration(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"serve", "--store-timeout", "50"}, nil, "--store-timeout 50: missing unit; write a duration such as 50ms"},
		{[]string{"serve", "--drain-timeout=10"}, nil, "--drain-timeout 10: missing unit; write a duration such as 10s"},
		{[]string{"serve", "--reload-debounce", "soon"}, nil, `--reload-debounce soon: not a duration; write one such as 200ms`},
		{[]string{"serve"}, map[string]string{"THROTTLEKIT_STORE_TIMEOUT": "50"}, `THROTTLEKIT_STORE_TIMEOUT="50": missing unit; write a duration such as 50ms`},
		{[]string{"serve", "--bogus"}, nil, "unknown flag --bogus (`throttlekit serve --help` lists the flags)"},
		{[]string{"probe", "--hold", "2"}, nil, "--hold 2: missing unit; write a duration such as 2s"},
	} {
		var out, errs bytes.Buffer
		code := run(context.Background(), tc.args, env(tc.env), &out, &errs)
		if code != 2 || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, tc.env, code, errs.String(), tc.want)
		}
		if lines := strings.Count(strings.TrimSpace(errs.String()), "\n") + 1; lines > 1 {
			t.Errorf("%v: %d lines on stderr, want the one error (no usage):\n%s", tc.args, lines, errs.String())
		}
	}
}

// TestVersionCommand: version prints the module version, the commit and
// the Go version from the build information.
func TestVersionCommand(t *testing.T) {
	code, out, errs := runCLI("version")
	if code != 0 || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("version: exit %d, stdout %q, stderr %q; want exit 0 and %s", code, out, errs, runtime.Version())
	}
	if code, out2, _ := runCLI("--version"); code != 0 || out2 != out {
		t.Errorf("--version: exit %d, %q; want what version prints", code, out2)
	}
	var b bytes.Buffer
	printVersion(&b, func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/throttlekit/throttlekit", Version: "v0.4.1"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abf7aaf0123456789"}, {Key: "vcs.time", Value: "2026-11-20T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}, true
	})
	want := "throttlekit v0.4.1\ncommit abf7aaf0123456789 (2026-11-20T10:00:00Z, with uncommitted changes)\ngo1.26.8\n"
	if b.String() != want {
		t.Errorf("version:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	printVersion(&b, func() (*debug.BuildInfo, bool) { return nil, false })
	if !strings.Contains(b.String(), "unknown") || !strings.Contains(b.String(), runtime.Version()) {
		t.Errorf("no build information: %q", b.String())
	}
	// A release build (make build, the Dockerfile) sets version from the
	// VERSION file: it wins over the module's.
	defer func(was string) { version = was }(version)
	version = "0.9.0"
	b.Reset()
	printVersion(&b, func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true
	})
	if !strings.HasPrefix(b.String(), "throttlekit 0.9.0\n") {
		t.Errorf("a release build's version: %q, want it to start with throttlekit 0.9.0", b.String())
	}
}

// TestValidateRefusesAnEmptyDirectory: validate fails on a directory with
// no policy file, and counts gates as well as domains.
func TestValidateRefusesAnEmptyDirectory(t *testing.T) {
	empty := t.TempDir()
	code, out, errs := runCLI("validate", empty)
	if code != 1 || strings.Contains(out, "OK") || !strings.Contains(errs, "no policy file") {
		t.Errorf("empty directory: exit %d, stdout %q, stderr %q; want exit 1 and no policy file", code, out, errs)
	}
	gates := t.TempDir()
	os.WriteFile(filepath.Join(gates, "g.yaml"), []byte("concurrency:\n  - name: c\n    match: {path_prefix: /c}\n"), 0o644)
	code, out, errs = runCLI("validate", gates)
	if code != 0 || !strings.Contains(out, gates+": OK (0 domains, 1 gate)") {
		t.Errorf("gates only: exit %d, stdout %q, stderr %q; want OK (0 domains, 1 gate)", code, out, errs)
	}
}

// TestValidateNamesListIndexes: errors found when the policy is compiled
// (a gate's queue outlasting Envoy's message_timeout, a bucket that takes
// too long to refill) name the list item they are in.
func TestValidateNamesListIndexes(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n  - key: j\n    rate_limit: {unit: year, requests_per_unit: 1, algorithm: gcra, burst: 50}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "g.yaml"), []byte("concurrency:\n  - name: a\n    match: {path_prefix: /a}\n  - name: c\n    match: {path_prefix: /c}\n    queue: {max: 3, timeout: 300ms}\n"), 0o644)
	code, _, errs := runCLI("validate", dir)
	for _, want := range []string{"a.yaml:6: descriptors[1].rate_limit: burst 50", "g.yaml:4: concurrency[1].queue.timeout: queue timeout 300ms"} {
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("exit %d, stderr:\n%s\nwant %q", code, errs, want)
		}
	}
}

// TestServeRefusesAnEmptyDirectory: serve does not start on a directory
// with no policy file.
func TestServeRefusesAnEmptyDirectory(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errs testenv.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, env(nil), io.Discard, &errs)
	}()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errs.String(), "no policy file") || strings.Contains(errs.String(), "previous policy") {
			t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and no policy file", code, errs.String())
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Errorf("serve is still running on an empty directory after 10s:\n%s", errs.String())
	}
}
