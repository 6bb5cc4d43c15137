// Package deploy holds the files operators deploy beside throttlekit. Its
// tests check that the alert rules are valid, that each alert fires on a
// series that shows its problem and stays silent on a healthy one (promtool's
// unit tests in alerts_test.yaml), and that the docker-compose Prometheus
// loads them; that the Kubernetes manifests decode strictly and agree with
// the binary (kubernetes_*_test.go); and that the Grafana dashboard's queries
// run against a real Prometheus scraping a real sidecar (grafana_*_test.go).
// cmd/sidecar's tests check that the rules name only metrics the binary
// exports.
package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// skipPromtool is the environment variable that lets the tests run without
// promtool (they skip instead of failing). CI installs promtool (.ci/run).
const skipPromtool = "THROTTLEKIT_SKIP_PROMTOOL"

// promtool returns the path of promtool; without it the test fails, or
// skips when skipPromtool is set.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv(skipPromtool) != "" {
		t.Skipf("promtool not found and %s is set: alert rules not checked", skipPromtool)
	}
	t.Fatalf("promtool not found (%v): install it (Debian/Ubuntu: apt-get install prometheus; .ci/run does) or set %s=1 to skip these checks", err, skipPromtool)
	return ""
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestAlertRulesAreValid(t *testing.T) {
	runPromtool(t, "check", "rules", "alerts.yaml")
}

// TestAlertRulesUnitTests runs alerts_test.yaml: every alert, on synthetic
// series, fires where its problem shows and stays silent where it does not.
func TestAlertRulesUnitTests(t *testing.T) {
	runPromtool(t, "test", "rules", "alerts_test.yaml")
}

// TestPrometheusConfigIsValid: prometheus.yml parses, and the rule files it
// names exist and are valid (promtool check config loads them).
func TestPrometheusConfigIsValid(t *testing.T) {
	runPromtool(t, "check", "config", "prometheus.yml")
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// alertNames are the alerts alerts.yaml defines, in file order.
func alertNames(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, "alerts.yaml", &doc)
	var names []string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" {
				t.Errorf("group %s: a rule without alert name or expr", g.Name)
			}
			names = append(names, r.Alert)
		}
	}
	if len(names) < 5 {
		t.Fatalf("only %d alert rules", len(names))
	}
	return names
}

// TestEveryAlertHasUnitTests: alerts_test.yaml loads alerts.yaml and has,
// for every alert, a case where it fires and one where it stays silent, so a
// new alert cannot land untested.
func TestEveryAlertHasUnitTests(t *testing.T) {
	var doc struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	readYAML(t, "alerts_test.yaml", &doc)
	if !slices.Contains(doc.RuleFiles, "alerts.yaml") {
		t.Errorf("alerts_test.yaml rule_files %v do not load alerts.yaml", doc.RuleFiles)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range doc.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, name := range alertNames(t) {
		if !fires[name] {
			t.Errorf("alert %s: no unit test in alerts_test.yaml where it fires", name)
		}
		if !silent[name] {
			t.Errorf("alert %s: no unit test in alerts_test.yaml where it stays silent", name)
		}
	}
}

// TestComposePrometheusLoadsAlerts: the Prometheus of docker-compose.yaml
// loads alerts.yaml: prometheus.yml names it in rule_files, and the compose
// service mounts it where that name resolves (beside the config file).
func TestComposePrometheusLoadsAlerts(t *testing.T) {
	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	readYAML(t, "prometheus.yml", &prom)
	var compose struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	readYAML(t, filepath.Join("..", "docker-compose.yaml"), &compose)
	svc, ok := compose.Services["prometheus"]
	if !ok {
		t.Fatal("docker-compose.yaml has no prometheus service")
	}
	configPath := "/etc/prometheus/prometheus.yml"
	for _, arg := range svc.Command {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configPath = v
		}
	}
	mounts := map[string]string{} // container path → host path, relative to the repository
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("prometheus volume %q: want host:container[:mode]", v)
		}
		mounts[parts[1]] = path.Clean(parts[0])
	}
	if mounts[configPath] != "deploy/prometheus.yml" {
		t.Errorf("the compose Prometheus reads %s, mounted from %q, want deploy/prometheus.yml", configPath, mounts[configPath])
	}
	var loaded []string
	for _, f := range prom.RuleFiles {
		in := f
		if !path.IsAbs(in) { // Prometheus resolves rule_files beside its config file
			in = path.Join(path.Dir(configPath), in)
		}
		host, ok := mounts[in]
		if !ok {
			t.Errorf("rule file %s (%s in the container) is not mounted", f, in)
			continue
		}
		if _, err := os.Stat(filepath.Join("..", host)); errors.Is(err, os.ErrNotExist) {
			t.Errorf("rule file %s is mounted from %s, which does not exist", f, host)
		}
		loaded = append(loaded, host)
	}
	if !slices.Contains(loaded, "deploy/alerts.yaml") {
		t.Errorf("the compose Prometheus does not load deploy/alerts.yaml: rule_files %v, volumes %v", prom.RuleFiles, svc.Volumes)
	}
}
