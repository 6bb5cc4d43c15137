package main

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestTokenBudgetExample: validate accepts config/budgets, and a sidecar
// serving it answers the commands its header shows: a check-only call, a
// charge past the month's budget (OVER_LIMIT, exit 3, and counted), and a
// check-only call refused after it.
func TestTokenBudgetExample(t *testing.T) {
	code, out, errs := runCLI("validate", "../../config/budgets")
	if code != 0 || !strings.Contains(out, "OK (1 domain") {
		t.Fatalf("validate config/budgets: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	src, err := os.ReadFile("../../config/budgets/ai.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := startInProcess(t, map[string]string{"ai.yaml": string(src)})
	ctx := context.Background()
	for _, step := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--check-only"}, 0, "OK: descriptor user_id=alice, limit monthly-tokens: 1000000 per month, remaining 1000000, resets in "},
		{[]string{"--charge", "999000"}, 0, "OK: descriptor user_id=alice, limit monthly-tokens: 1000000 per month, remaining 1000, resets in "},
		{[]string{"--charge", "1200"}, 3, "OVER_LIMIT: descriptor user_id=alice, limit monthly-tokens: 1000000 per month, remaining 0, resets in "},
		{[]string{"--check-only"}, 3, "OVER_LIMIT: descriptor user_id=alice, limit monthly-tokens: 1000000 per month, remaining 0, resets in "},
	} {
		args := append([]string{"--addr", s.grpcAddr, "--domain", "ai", "--descriptor", "user_id=alice"}, step.args...)
		code, out, errs := runProbe(ctx, args...)
		if code != step.code || !strings.HasPrefix(out, step.want) {
			t.Fatalf("probe %v: exit %d, stdout %q, stderr %q; want exit %d and %q...", step.args, code, out, errs, step.code, step.want)
		}
	}
}
