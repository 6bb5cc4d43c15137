package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// TestValidateRefusesWhatServeRefuses (issue 32, item 2): for each refusal
// serve's wiring makes at load (a federated rule without a federation, a
// regional budget without the region's own Redis, a distributed gate
// whose coordinator is not configured), serve with the flags given exits
// before serving with the message, and validate, given the same flags and
// the directory, exits 1 with the same message. Validate used to say OK to
// every one of them. With the flags that serve needs, validate says OK.
func TestValidateRefusesWhatServeRefuses(t *testing.T) {
	l3 := testenv.StartRedis(t)
	federated := "domain: fed\ndescriptors:\n  - key: k\n    mode: federated\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	regional := "domain: fed\ndescriptors:\n  - key: k\n    mode: federated\n    federation: {outage: regional_only, regional_limit: 50}\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	pgGate := strings.Replace(fleetPolicy, "coordinator: redis", "coordinator: postgres", 1)
	for _, tc := range []struct {
		name   string
		policy string
		flags  []string
		want   string // the refusal; "" when serve and validate accept
	}{
		{"federated rule, no federation", federated, nil, "needs this process to join a federation"},
		{"regional_only on the memory store", regional, []string{"--region", "eu", "--federation-url", l3.URL()}, "regional_only needs the region's own Redis"},
		{"redis gate on the memory store", fleetPolicy, nil, "coordinator: redis needs serve --store redis"},
		{"postgres gate without --postgres-url", pgGate, nil, "coordinator: postgres needs serve --postgres-url"},
		{"federated rule in a federation", federated, []string{"--region", "eu", "--federation-url", l3.URL()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(tc.policy), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errs bytes.Buffer
			code := run(context.Background(), append(append([]string{"validate"}, tc.flags...), dir), env(nil), &out, &errs)
			if tc.want == "" {
				if code != 0 {
					t.Fatalf("validate: exit %d, %s%s; want OK", code, out.String(), errs.String())
				}
				return
			}
			if code != exitFailed || !strings.Contains(errs.String(), tc.want) {
				t.Errorf("validate: exit %d, stdout %q, stderr %q; want exit %d saying %q", code, out.String(), errs.String(), exitFailed, tc.want)
			}
			s := runServe(t, append([]string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, tc.flags...), env(nil))
			if s.grpcAddr != "" || !strings.Contains(s.stderr.String(), tc.want) {
				t.Errorf("serve: exit %d, serving on %q; want it refused saying %q:\n%s", s.code, s.grpcAddr, tc.want, s.stderr.String())
			}
		})
	}
}

// TestFilesBelowThePolicyDirectoryAreNamed (issue 42, item 6): a policy
// directory with sub/api.yaml, read without --policy-tree, loses it; serve
// and validate now say so, naming it, and validate --policy-tree reads it.
// A serve that fails with --policy-tree suggests the validate command that
// fails the same way (it suggested one without the tree, which passed).
func TestFilesBelowThePolicyDirectoryAreNamed(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"top.yaml": "domain: top\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		"team/api.yaml": "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := filepath.Join("team", "api.yaml") + " below " + dir + " is not read"
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"validate", dir}, env(nil), &out, &errs); code != 0 || !strings.Contains(errs.String(), want) || !strings.Contains(out.String(), "OK (1 domain") {
		t.Errorf("validate: exit %d, stdout %q, stderr %q; want OK (1 domain) and %q", code, out.String(), errs.String(), want)
	}
	out.Reset()
	errs.Reset()
	if code := run(context.Background(), []string{"validate", "--policy-tree", dir}, env(nil), &out, &errs); code != 0 || strings.Contains(errs.String(), "not read") || !strings.Contains(out.String(), "OK (2 domains") {
		t.Errorf("validate --policy-tree: exit %d, stdout %q, stderr %q; want OK (2 domains), no note", code, out.String(), errs.String())
	}
	s := runServe(t, []string{"serve", "--policy", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--log-format", "json"}, env(nil))
	if s.grpcAddr == "" || strings.Count(s.stderr.String(), want) != 1 {
		t.Errorf("serve: %q, want it serving and warning once %q:\n%s", s.grpcAddr, want, s.stderr.String())
	}
	// A tree that fails: the suggested command fails too.
	if err := os.WriteFile(filepath.Join(dir, "team", "bad.yaml"), []byte("domain: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = runServe(t, []string{"serve", "--policy", dir, "--policy-tree", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, env(nil))
	if s.grpcAddr != "" || !strings.Contains(s.stderr.String(), "`throttlekit validate --policy-tree "+dir+"` lists them") {
		t.Errorf("serve --policy-tree on a bad tree: %q, want it stopped, suggesting validate --policy-tree:\n%s", s.grpcAddr, s.stderr.String())
	}
}
