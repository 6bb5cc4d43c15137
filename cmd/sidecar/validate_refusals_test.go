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
