package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// prometheusBinary returns the path of the prometheus server; without it
// the test fails, or skips when skipPromtool is set (the Debian package
// that brings promtool brings the server too).
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err == nil {
		return p
	}
	if os.Getenv(skipPromtool) != "" {
		t.Skipf("prometheus not found and %s is set: dashboard queries not checked", skipPromtool)
	}
	t.Fatalf("prometheus not found (%v): install it (Debian/Ubuntu: apt-get install prometheus; .ci/run does) or set %s=1 to skip these checks", err, skipPromtool)
	return ""
}

// prometheusListening is the server's log line naming its bound address.
var prometheusListening = regexp.MustCompile(`msg="Listening on" address=(\S+)`)

// startPrometheus starts a real Prometheus on a free loopback port that
// scrapes target's /metrics every second, with its storage in a temporary
// directory, and returns its base URL. Cleanup kills it.
func startPrometheus(t *testing.T, target string) string {
	t.Helper()
	bin := prometheusBinary(t)
	dir := t.TempDir()
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: throttlekit
    static_configs: [{targets: [%q]}]
`, target)
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := startProcess(t, exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:0", "--log.level=info"), "prometheus")
	var base string
	if !testenv.Eventually(func() bool {
		if m := prometheusListening.FindStringSubmatch(out.String()); m != nil {
			base = "http://" + m[1]
			return true
		}
		return false
	}) {
		t.Fatalf("prometheus did not say where it listens within 10s:\n%s", out.String())
	}
	if !testenv.Eventually(func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("prometheus not ready within 10s:\n%s", out.String())
	}
	return base
}

// promResult is one series of an instant query's answer.
type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// float is the sample's value (NaN and ±Inf included).
func (r promResult) float() float64 {
	s, _ := r.Value[1].(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return f
}

// promQuery runs an instant query through Prometheus's HTTP API. It returns
// the error Prometheus gives (a parse error, say) as err.
func promQuery(base, query string) ([]promResult, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string       `json:"resultType"`
			Result     []promResult `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("HTTP %d, undecodable answer: %v", resp.StatusCode, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s: %s", body.ErrorType, body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want vector (an instant query of a panel)", body.Data.ResultType)
	}
	return body.Data.Result, nil
}

// waitUntil polls cond every 50 ms until it holds or within has passed.
func waitUntil(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}
