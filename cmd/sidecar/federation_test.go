package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

func TestFederationFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--region", "eu"}, "--region needs --federation-url"},
		{[]string{"--federation-url", "redis://127.0.0.1:1/0"}, "--federation-url needs --region"},
		{[]string{"--region", "eu", "--federation-url", "mysql://root:hunter2@db/x"}, `--federation-url mysql://root:xxxxx@db/x: scheme "mysql": want redis://, rediss://, redis+cluster:// or postgres://`},
		{[]string{"--region", "e/u", "--federation-url", "redis://127.0.0.1:1/0"}, `--region "e/u": at most 64 bytes, without / or NUL`},
		{[]string{"--region", "eu", "--federation-url", "redis://127.0.0.1:1/0", "--federation-timeout", "0s"}, "--federation-timeout and --federation-probe-after must be positive"},
	}
	for _, tc := range cases {
		_, err := parseServe(tc.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: the error shows the password: %v", tc.args, err)
		}
	}
	if _, err := parseServe([]string{"--region", "eu", "--federation-url", "postgres://u@127.0.0.1:1/db"}, env(nil), io.Discard); err != nil {
		t.Errorf("a valid federation: %v", err)
	}
}

// TestFederationRegionalOnlyNeedsRedis: with --store memory a process has
// no regional store, and a regional_only rule is refused at load, saying
// why; fail_closed is accepted.
func TestFederationRegionalOnlyNeedsRedis(t *testing.T) {
	l3 := testenv.StartRedis(t)
	c, err := parseServe([]string{"--region", "eu", "--federation-url", l3.URL()}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFederation(context.Background(), c, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: 1e9}
	_, err = f.rule(engine.FederatedRule{Rule: rule, Federation: policy.Federation{Outage: policy.RegionalOnly, RegionalLimit: 3}})
	if err == nil || !strings.Contains(err.Error(), "regional_only needs the region's own Redis") {
		t.Fatalf("regional_only with --store memory: %v", err)
	}
	fed, err := f.rule(engine.FederatedRule{Ref: engine.RuleRef{Domain: "d", Name: "n"}, Rule: rule, Federation: policy.Federation{Outage: policy.FailClosed}})
	if err != nil || fed.Store == nil || fed.Batch != 1 {
		t.Fatalf("fail_closed: %+v, %v; want a region with the default batch (a tenth of 10)", fed, err)
	}
}
