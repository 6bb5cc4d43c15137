package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// alertsFile holds the Prometheus alert rules shipped with throttlekit.
const alertsFile = "../../deploy/alerts.yaml"

// selector is one series selector of an alert expression: a metric name and
// its label matchers.
type selector struct {
	text     string
	name     string
	matchers []matcher
}

// matcher is one PromQL label matcher: name, op (=, !=, =~, !~) and value.
type matcher struct{ name, op, value string }

// matches reports whether a series with labels have satisfies m. A missing
// label is the empty string, as in PromQL; regexps are anchored.
func (m matcher) matches(have map[string]string) bool {
	v := have[m.name]
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return regexp.MustCompile("^(?:" + m.value + ")$").MatchString(v)
	default: // !~
		return !regexp.MustCompile("^(?:" + m.value + ")$").MatchString(v)
	}
}

var (
	selectorRE = regexp.MustCompile(`(throttlekit_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
)

// alertSelectors returns every throttlekit series selector the alert
// expressions in alertsFile read.
func alertSelectors(t *testing.T) []selector {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []selector
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			for _, m := range selectorRE.FindAllStringSubmatch(r.Expr, -1) {
				sel := selector{text: m[0], name: m[1]}
				if m[2] != "" {
					for _, kv := range strings.Split(strings.Trim(m[2], "{}"), ",") {
						mm := matcherRE.FindStringSubmatch(kv)
						if mm == nil {
							t.Fatalf("%s: alert %s: cannot read the matcher %q", alertsFile, r.Alert, kv)
						}
						if strings.HasSuffix(mm[2], "~") {
							if _, err := regexp.Compile(mm[3]); err != nil {
								t.Fatalf("%s: alert %s: matcher %q: %v", alertsFile, r.Alert, kv, err)
							}
						}
						sel.matchers = append(sel.matchers, matcher{mm[1], mm[2], mm[3]})
					}
				}
				out = append(out, sel)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no throttlekit series in any alert", alertsFile)
	}
	return out
}

// isCounter says whether a series only ever grows: its name says so.
func isCounter(name string) bool {
	for _, suffix := range []string{"_total", "_bucket", "_count", "_sum"} {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// TestAlertSeriesExistAtStart: every series an alert in deploy/alerts.yaml
// reads exists right after start — a counter at 0 — so that increase() and
// rate() see its first change. A counter created by its first increment
// is invisible to them: increase(x{result="failure"}[15m]) stays empty after
// the first failed reload. And a healthy memory-store sidecar says its store
// is up, or ThrottlekitStoreDown fires. The series of distributed gates
// (throttlekit_gate_fleet_*) are read from a sidecar with one, over Redis.
func TestAlertSeriesExistAtStart(t *testing.T) {
	sels := alertSelectors(t)
	s := startServe(t, nil, nil) // memory store; testPolicy has one gate
	if s.httpAddr == "" {
		t.Fatalf("serve did not start (exit %d)", s.code)
	}
	series := s.scrape(t)
	var fleetSeries, fedSeries, rlqsSeries []metric
	for _, sel := range sels {
		from := series
		if sel.name == "up" {
			continue // Prometheus's own, not the sidecar's
		}
		if strings.HasPrefix(sel.name, "throttlekit_federation_") {
			if fedSeries == nil {
				f := startServeWith(t, fedAlertPolicy, []string{"--region", "eu", "--federation-url", testenv.StartRedis(t).URL()}, nil)
				if f.httpAddr == "" {
					t.Fatalf("serve with a federated rule did not start (exit %d)", f.code)
				}
				fedSeries = f.scrape(t)
			}
			from = fedSeries
		}
		if strings.HasPrefix(sel.name, "throttlekit_rlqs_") {
			if rlqsSeries == nil {
				f := startServeWith(t, testPolicy, []string{"--rlqs"}, nil)
				if f.httpAddr == "" {
					t.Fatalf("serve --rlqs did not start (exit %d)", f.code)
				}
				rlqsSeries = f.scrape(t)
			}
			from = rlqsSeries
		}
		if strings.HasPrefix(sel.name, "throttlekit_gate_fleet_") {
			if fleetSeries == nil {
				f := startServeWith(t, fleetPolicy, []string{"--store", "redis", "--redis-url", testenv.StartRedis(t).URL(), "--node-id", "a"}, nil)
				if f.httpAddr == "" {
					t.Fatalf("serve with a distributed gate did not start (exit %d)", f.code)
				}
				fleetSeries = f.scrape(t)
			}
			from = fleetSeries
		}
		n := 0
		for _, m := range from {
			if m.name != sel.name || !matchesAll(m.labels, sel.matchers) {
				continue
			}
			n++
			if isCounter(m.name) && m.value != 0 {
				t.Errorf("%s: %v = %v right after start, want 0", sel.text, m.labels, m.value)
			}
		}
		if n == 0 {
			t.Errorf("%s: no series right after start: an alert reading it sees nothing until it first changes", sel.text)
		}
	}
	if up := s.gauge(t, "throttlekit_store_up"); up != 1 {
		t.Errorf("throttlekit_store_up = %v with the memory store, want 1", up)
	}
}

// fedAlertPolicy is one federated rule, for the federation alerts' series.
const fedAlertPolicy = "domain: fed\ndescriptors:\n  - key: k\n    mode: federated\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"

func matchesAll(have map[string]string, ms []matcher) bool {
	for _, m := range ms {
		if !m.matches(have) {
			return false
		}
	}
	return true
}

// TestBuildInfo: /metrics serves throttlekit_build_info 1 with the
// release and Go versions, what deploy/alerts.yaml's ThrottlekitDown finds
// throttlekit's targets by whatever their scrape job is named.
func TestBuildInfo(t *testing.T) {
	s := startServe(t, nil, nil)
	var found bool
	for _, m := range s.scrape(t) {
		if m.name == "throttlekit_build_info" && m.value == 1 && m.labels["version"] != "" && strings.HasPrefix(m.labels["goversion"], "go") {
			found = true
		}
	}
	if !found {
		t.Error("no throttlekit_build_info 1 with version and goversion labels")
	}
}

// TestUpstreamMetrics (issue 42, item 4): with --upstream-metrics, and with
// upstream's USE_PROMETHEUS=true, /metrics serves envoyproxy/ratelimit's
// names for what it counts (ratelimit_service_rate_limit_* by domain and
// descriptor key), beside throttlekit's own; without, none of them (they
// were never served: dashboards and alerts written for upstream went
// blank on a switch-over).
func TestUpstreamMetrics(t *testing.T) {
	count := func(s *sidecar) (within, over float64, n int) {
		for _, m := range s.scrape(t) {
			if !strings.HasPrefix(m.name, "ratelimit_service_rate_limit_") {
				continue
			}
			n++
			if m.labels["domain"] == "t" && m.labels["key1"] == "k" && m.labels["key2"] == "" {
				switch m.name {
				case "ratelimit_service_rate_limit_within_limit":
					within = m.value
				case "ratelimit_service_rate_limit_over_limit":
					over = m.value
				}
			}
		}
		return within, over, n
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		on   bool
	}{
		{"off", nil, nil, false},
		{"--upstream-metrics", []string{"--upstream-metrics"}, nil, true},
		{"USE_PROMETHEUS", nil, map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServeWith(t, tlsPolicy, tc.args, tc.env)
			if s.grpcAddr == "" {
				t.Fatalf("serve did not start:\n%s", s.stderr.String())
			}
			for range 7 { // tlsPolicy: 5 an hour; seven asks are 5 within, 2 over
				askRedis(t, s, "upstream")
			}
			within, over, n := count(s)
			switch {
			case !tc.on && n != 0:
				t.Errorf("%d upstream series without the switch, want none", n)
			case tc.on && (n == 0 || within != 5 || over != 2):
				t.Errorf("within %v, over %v (%d series): want 5 and 2 (5 an hour)", within, over, n)
			}
		})
	}
}
