package main

import (
	"github.com/throttlekit/throttlekit/internal/telemetry"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// deployAlerts holds the alert rules operators load (deploy/README.md).
const deployAlerts = "../../deploy/alerts.yaml"

var (
	fqName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	// A PromQL string literal: double or single quotes with escapes, or
	// backticks (raw).
	promqlString = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	// A PromQL comment runs from # to the end of the line.
	promqlComment = regexp.MustCompile(`#[^\n]*`)
	// Our metric names: an identifier starting with throttlekit_ that is not
	// the tail of a longer identifier.
	ourMetric = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:])(throttlekit_[A-Za-z0-9_:]*)`)
)

// registeredMetrics returns the names of the metric families the sidecar's
// registry describes: every family /metrics can expose, whether or not it has
// a series yet.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics(e, nil)
	newShedder(1, m.reg)                          // serve registers the gRPC server's shedding counter beside them
	m.reg.MustRegister(telemetry.RLQSCollector{}) // and, with --rlqs, the quota service's series
	ch := make(chan *prometheus.Desc)
	go func() { m.reg.Describe(ch); close(ch) }()
	names := map[string]bool{}
	for d := range ch {
		match := fqName.FindStringSubmatch(d.String())
		if match == nil {
			t.Fatalf("cannot read a metric name from %s", d)
		}
		names[match[1]] = true
	}
	return names
}

// metricsInExpr returns the throttlekit_ metric names a PromQL expression
// selects, leaving out label values, strings and comments.
func metricsInExpr(expr string) []string {
	expr = promqlString.ReplaceAllString(expr, `""`)
	expr = promqlComment.ReplaceAllString(expr, "")
	var names []string
	for _, m := range ourMetric.FindAllStringSubmatch(expr, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// metricFamily returns the family a series name belongs to: the name itself when
// the registry has it, else the histogram or summary whose _bucket, _sum or
// _count series it is (a counter, named _total, has none); "" when none.
func metricFamily(name string, registered map[string]bool) string {
	if registered[name] {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registered[base] && !strings.HasSuffix(base, "_total") {
			return base
		}
	}
	return ""
}

func TestMetricsInExpr(t *testing.T) {
	registered := map[string]bool{"throttlekit_gate_rtt_seconds": true, "throttlekit_gate_limit": true, "throttlekit_store_calls_total": true}
	for _, tc := range []struct {
		name, expr string
		want       []string
	}{
		{"selector", `throttlekit_gate_limit{gate="a"} < 2`, []string{"throttlekit_gate_limit"}},
		{"histogram series", `histogram_quantile(0.99, sum by (le) (rate(throttlekit_gate_rtt_seconds_bucket[5m])))`, []string{"throttlekit_gate_rtt_seconds_bucket"}},
		{"label values and strings are not metrics", `up{job="throttlekit_sidecar"} and on() label_replace(vector(1), "x", 'throttlekit_y', "", "")`, nil},
		{"comments are not metrics", "throttlekit_gate_limit # throttlekit_old_name\n> 1", []string{"throttlekit_gate_limit"}},
		{"tail of another name", `envoy_throttlekit_x + throttlekit_gate_limit`, []string{"throttlekit_gate_limit"}},
		{"repeated", `throttlekit_gate_limit / throttlekit_gate_limit`, []string{"throttlekit_gate_limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := metricsInExpr(tc.expr); !slices.Equal(got, tc.want) {
				t.Errorf("metricsInExpr(%q) = %q, want %q", tc.expr, got, tc.want)
			}
		})
	}
	for name, want := range map[string]string{
		"throttlekit_gate_rtt_seconds_bucket":  "throttlekit_gate_rtt_seconds",
		"throttlekit_gate_rtt_seconds_count":   "throttlekit_gate_rtt_seconds",
		"throttlekit_gate_limit":               "throttlekit_gate_limit",
		"throttlekit_gate_limits":              "",
		"throttlekit_store_calls_total_count":  "",
		"throttlekit_gate_rtt_seconds_buckets": "",
	} {
		if got := metricFamily(name, registered); got != want {
			t.Errorf("metricFamily(%s) = %q, want %q", name, got, want)
		}
	}
}

// TestAlertsNameExportedMetrics: every metric an alert in deploy/alerts.yaml
// selects is one the binary's registry exports (a renamed metric would leave
// its alert silent forever).
func TestAlertsNameExportedMetrics(t *testing.T) {
	registered := registeredMetrics(t)
	raw, err := os.ReadFile(deployAlerts)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", deployAlerts, err)
	}
	for _, g := range doc.Groups { // a recording rule's series is known too
		for _, r := range g.Rules {
			if r.Record != "" {
				registered[r.Record] = true
			}
		}
	}
	rules, checked := 0, 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			rules++
			for _, name := range metricsInExpr(r.Expr) {
				checked++
				if metricFamily(name, registered) == "" {
					t.Errorf("rule %s%s selects %s, which the sidecar does not export", r.Alert, r.Record, name)
				}
			}
		}
	}
	if rules == 0 || checked < rules {
		t.Fatalf("%d rules, %d metric names checked: %s not read as expected", rules, checked, deployAlerts)
	}
}
