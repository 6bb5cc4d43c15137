package deploy

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard operators import (and the compose
// stack provisions).
const dashboardFile = "grafana/throttlekit.json"

// corePanels are the panels that must show data for a sidecar with a
// leased rule, a cached_deny rule and two concurrency gates, over Redis,
// under a little traffic (TestDashboardQueriesReturnData). The others need
// what that sidecar lacks: a distributed gate, a federation.
var corePanels = []string{
	"Decisions by code", "Decisions by rule", "Over-limit ratio", "gRPC calls by method and code",
	"ShouldRateLimit latency", "Unknown domains",
	"Store latency", "Store calls and errors", "Store up and fallbacks",
	"Leased local-hit ratio", "Round trips per admission", "Leases", "L1 keys", "L1 evictions and cached denials",
	"Gate limit", "Gate inflight and queued", "Gate admissions and rejections", "Gate RTT",
	"Policy reloads", "Since last good reload", "Policy versions",
}

// situationalMetrics exist only in situations the test's sidecar is not
// in; the dashboard may name them without the scrape having them. Their
// names are still checked against the source (TestDashboardNamesRealMetrics).
var situationalMetrics = regexp.MustCompile(`^throttlekit_(store_errors_total|gate_fleet_.*|federation_.*)$`)

// dashPanel is the part of a Grafana panel the tests read.
type dashPanel struct {
	ID      int         `json:"id"`
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Panels  []dashPanel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
}

// loadDashboard returns the dashboard's panels that query (rows flattened).
func loadDashboard(t *testing.T) []dashPanel {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string      `json:"uid"`
		Title      string      `json:"title"`
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("%s: no uid or title", dashboardFile)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Equal(vars, []string{"datasource", "job", "instance"}) {
		t.Errorf("%s: variables %v, want datasource, job, instance (the test substitutes them)", dashboardFile, vars)
	}
	var out []dashPanel
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboardIsWellFormed: every panel has a unique id, a title, the
// data source variable and at least one query; every core panel exists.
func TestDashboardIsWellFormed(t *testing.T) {
	panels := loadDashboard(t)
	ids, titles := map[int]bool{}, map[string]bool{}
	for _, p := range panels {
		if p.ID == 0 || ids[p.ID] || p.Title == "" || titles[p.Title] {
			t.Errorf("panel %d %q: want a unique id and a unique title", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q, query %s: empty", p.Title, tg.RefID)
			}
		}
	}
	for _, c := range corePanels {
		if !titles[c] {
			t.Errorf("core panel %q is not in the dashboard", c)
		}
	}
}

// metricName finds the metric names a PromQL expression selects (label
// values and label names in by/on/without lists left out).
var metricName = regexp.MustCompile(`\b(throttlekit_[a-z0-9_]+)\b`)

// dashboardMetrics returns each metric family the dashboard names (a
// histogram's _bucket series as the histogram), with a panel naming it.
func dashboardMetrics(panels []dashPanel) map[string]string {
	out := map[string]string{}
	for _, p := range panels {
		for _, tg := range p.Targets {
			for _, m := range metricName.FindAllStringSubmatch(tg.Expr, -1) {
				out[strings.TrimSuffix(m[1], "_bucket")] = p.Title
			}
		}
	}
	return out
}

// TestDashboardNamesRealMetrics: every metric the dashboard names is one
// the sidecar's source defines (a quoted name in cmd/sidecar or in
// internal/telemetry, its collectors), so a typo in a panel the live test
// cannot fill (a federation panel) still fails.
func TestDashboardNamesRealMetrics(t *testing.T) {
	var files []string
	for _, dir := range [][]string{{"..", "cmd", "sidecar"}, {"..", "internal", "telemetry"}} {
		fs, err := filepath.Glob(filepath.Join(append(dir, "*.go")...))
		if err != nil || len(fs) == 0 {
			t.Fatalf("no source in %s: %v", filepath.Join(dir...), err)
		}
		files = append(files, fs...)
	}
	var src strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(raw)
	}
	for name, panel := range dashboardMetrics(loadDashboard(t)) {
		if !strings.Contains(src.String(), `"`+name+`"`) {
			t.Errorf("panel %q names %s, which neither cmd/sidecar nor internal/telemetry defines", panel, name)
		}
	}
}

// TestComposeProvisionsDashboard: the compose Grafana mounts the
// provisioning directory and the dashboard, the dashboard provider reads
// the directory the dashboard is mounted in, and the data source is the
// compose Prometheus.
func TestComposeProvisionsDashboard(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Volumes []string `yaml:"volumes"`
			Ports   []string `yaml:"ports"`
		} `yaml:"services"`
	}
	readYAML(t, filepath.Join("..", "docker-compose.yaml"), &compose)
	svc, ok := compose.Services["grafana"]
	if !ok {
		t.Fatal("docker-compose.yaml has no grafana service")
	}
	mounts := map[string]string{} // container path → host path, relative to the repository
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("grafana volume %q: want host:container[:mode]", v)
		}
		host := path.Clean(parts[0])
		if _, err := os.Stat(filepath.Join("..", host)); err != nil {
			t.Errorf("grafana mounts %s, which does not exist: %v", host, err)
		}
		mounts[parts[1]] = host
	}
	for _, p := range svc.Ports {
		if !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("grafana publishes %q: publish on 127.0.0.1 only", p)
		}
	}
	if mounts["/etc/grafana/provisioning"] != "deploy/grafana/provisioning" {
		t.Fatalf("grafana mounts %v: want deploy/grafana/provisioning at /etc/grafana/provisioning", mounts)
	}
	var providers struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/throttlekit.yaml", &providers)
	found := false
	for _, p := range providers.Providers {
		for container, host := range mounts {
			if p.Type == "file" && host == "deploy/"+dashboardFile && path.Dir(container) == path.Clean(p.Options.Path) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no file provider reads the directory %s is mounted in (providers %+v, mounts %v)", dashboardFile, providers.Providers, mounts)
	}
	var sources struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, "grafana/provisioning/datasources/prometheus.yaml", &sources)
	if len(sources.Datasources) != 1 || sources.Datasources[0].Type != "prometheus" || sources.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("data sources %+v: want the compose prometheus service, http://prometheus:9090", sources.Datasources)
	}
	if _, ok := compose.Services["prometheus"]; !ok {
		t.Error("the data source names the compose service prometheus, which docker-compose.yaml lacks")
	}
}
