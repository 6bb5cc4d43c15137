package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

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
		c, err := newRedisClient(ok, 50*time.Millisecond)
		if err != nil {
			t.Errorf("%s: %v", ok, err)
			continue
		}
		c.Close()
	}
	for _, bad := range []string{"http://secret@x", "redis://:hunter2@h:6379/0?bogus=1", "redis://:hunter2@%zz"} {
		_, err := newRedisClient(bad, time.Second)
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
