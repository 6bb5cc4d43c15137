package e2e

import (
	"fmt"
	"github.com/throttlekit/throttlekit/internal/testenv"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// storeTimeout is --store-timeout of every sidecar (the default).
const storeTimeout = 50 * time.Millisecond

// The day, as windows aligned on Unix time count it.
const day = 24 * time.Hour

// reloadRule is the one rule of e2e.yaml the reload test rewrites.
type reloadRule struct {
	unit  string
	limit int
}

// defaultE2E is e2e.yaml as every sidecar starts with it.
var defaultE2E = reloadRule{unit: "day", limit: 2}

// e2ePolicy is the e2e domain: precisely the rules the assertions need, each
// on a key of its own so that no scenario's counters touch another's. Limits
// count per UTC day (or year) so that no window ends during a run, except
// by a coincidence of milliseconds around midnight.
func e2ePolicy(r reloadRule) string {
	return fmt.Sprintf(`# The e2e suite's domain (test/e2e writes this file).
domain: e2e
descriptors:
  # current_limit, limit_remaining and duration_until_reset.
  - key: account
    rate_limit:
      name: account_daily
      unit: day
      requests_per_unit: 5

  # Response headers; with "generous" in the same request.
  - key: hdr
    rate_limit:
      name: hdr_daily
      unit: day
      requests_per_unit: 5

  # Nested descriptors: (tenant, user); acme's users get less. Unnamed, so
  # their metrics are "tenant_acme.user" and "tenant.user".
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: 2
  - key: tenant
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: 10

  # Wildcards in the middle of a value: each matching path its own counter,
  # or, with share_threshold, one counter for them all.
  - key: path
    value: /api/*/items
    rate_limit:
      unit: day
      requests_per_unit: 2
  - key: path
    value: /shared/*/feed
    share_threshold: true
    rate_limit:
      unit: day
      requests_per_unit: 3

  # hits_addend, at request and descriptor level.
  - key: cost
    rate_limit:
      unit: day
      requests_per_unit: 10

  # Shadow mode: over the limit yet OK.
  - key: shadowed
    shadow_mode: true
    rate_limit:
      name: shadow_rule
      unit: day
      requests_per_unit: 1

  # replaces: with vip in the request, caller_base does not apply.
  - key: caller
    rate_limit:
      name: caller_base
      unit: day
      requests_per_unit: 1
  - key: vip
    rate_limit:
      name: vip_limit
      unit: day
      requests_per_unit: 5
      replaces:
        - name: caller_base

  # Several limits on one descriptor.
  - key: multi
    rate_limits:
      - name: multi_day
        unit: day
        requests_per_unit: 3
      - name: multi_year
        unit: year
        requests_per_unit: 4

  # A request "scarce" denies takes nothing from "generous".
  - key: generous
    rate_limit:
      name: generous
      unit: day
      requests_per_unit: 100
  - key: scarce
    rate_limit:
      name: scarce
      unit: day
      requests_per_unit: 1

  # Counters in /metrics.
  - key: counted
    rate_limit:
      name: counted_rule
      unit: day
      requests_per_unit: 2

  # POST /json.
  - key: json
    rate_limit:
      unit: day
      requests_per_unit: 1

  # Hot reload rewrites this rule.
  - key: reload
    rate_limit:
      name: reload_rule
      unit: %s
      requests_per_unit: %d

  # Redis outage: what each on_store_error policy answers.
  - key: outage_allow
    on_store_error: allow
    rate_limit:
      unit: day
      requests_per_unit: 2
  - key: outage_deny
    on_store_error: deny
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: outage_error
    on_store_error: error
    rate_limit:
      unit: day
      requests_per_unit: 100

  # SIGTERM drain: a limit no burst reaches.
  - key: drain
    rate_limit:
      unit: day
      requests_per_unit: 1000000000
`, r.unit, r.limit)
}

// copyExamplePolicies copies the repository's example policies
// (config/*.yaml) into dir; the suite asserts on their rules too.
func copyExamplePolicies(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(moduleRoot, "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policies in %s (err %v): the suite starts the sidecar with them", filepath.Join(moduleRoot, "config", "*.yaml"), err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// writePolicy replaces dir/e2e.yaml atomically, as an editor or a
// ConfigMap update does: a temporary file in the same directory (not named
// *.yaml, so no load can read it half written) renamed over the old one.
func writePolicy(t *testing.T, dir, content string) {
	t.Helper()
	testenv.WriteFileAtomic(t, filepath.Join(dir, "e2e.yaml"), []byte(content))
}
