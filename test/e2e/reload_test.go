package e2e

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// reloadDeadline bounds how long a rewritten policy may take to be
// answered from: the 50ms debounce plus a load, with room for a slow CI.
const reloadDeadline = 5 * time.Second

// testHotReload rewrites e2e.yaml by atomic rename: answers follow the new
// limit and the success counter grows; then a broken e2e.yaml (an unknown
// unit) is counted as a failure, logged with its file and line, and the
// previous policy keeps answering.
func testHotReload(t *testing.T, s *sidecar) {
	kept := unique(t, "kept")
	resp := runSteps(t, s, []step{
		{"the policy as started", request("e2e", desc("reload", kept)), ok, []string{"OK [reload_rule 2/DAY] remaining=1"}},
	})[0]
	if h := resp.GetResponseHeadersToAdd(); len(h) != 0 {
		t.Errorf("started without --response-headers, the response adds headers %v", h)
	}
	m0 := s.metrics(t)
	hash0 := m0.labelValues("throttlekit_policy_info", "hash")

	// A new limit: 7 a day.
	writePolicy(t, s.policyDir, e2ePolicy(reloadRule{unit: "day", limit: 7}))
	probe := 0
	took := waitFor(t, reloadDeadline, "answers follow e2e.yaml rewritten with 7 a day", func() (bool, string) {
		probe++
		resp, err := s.call(request("e2e", desc("reload", unique(t, fmt.Sprint("probe", probe)))))
		if err != nil {
			return false, err.Error()
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 7, statusLine(resp.GetStatuses()[0])
	})
	t.Logf("the new policy answered %v after the rename", took)
	waitFor(t, reloadDeadline, `throttlekit_policy_reloads_total{result="success"} grows`, func() (bool, string) {
		m := s.metrics(t)
		return m.get("throttlekit_policy_reloads_total", "result", "success") > m0.get("throttlekit_policy_reloads_total", "result", "success"),
			fmt.Sprintf("success %v, as before the rewrite", m.get("throttlekit_policy_reloads_total", "result", "success"))
	})
	m1 := s.metrics(t)
	hash1 := m1.labelValues("throttlekit_policy_info", "hash")
	if len(hash1) != 1 || len(hash0) != 1 || hash1[0] == hash0[0] {
		t.Errorf("throttlekit_policy_info hash %q before the rewrite, %q after: want one hash each, different", hash0, hash1)
	}
	// Only the rate changed: the window's counter is kept (1 of 7 used).
	runSteps(t, s, []step{
		{"the counter survives a new rate", request("e2e", desc("reload", kept)), ok, []string{"OK [reload_rule 7/DAY] remaining=5"}},
	})

	// A broken policy: "fortnight" is no unit.
	fail0 := m1.get("throttlekit_policy_reloads_total", "result", "failure")
	writePolicy(t, s.policyDir, e2ePolicy(reloadRule{unit: "fortnight", limit: 9}))
	waitFor(t, reloadDeadline, `throttlekit_policy_reloads_total{result="failure"} grows after a broken e2e.yaml`, func() (bool, string) {
		got := s.metrics(t).get("throttlekit_policy_reloads_total", "result", "failure")
		return got > fail0, fmt.Sprintf("failure %v, as before", got)
	})
	runSteps(t, s, []step{
		{"the previous policy still answers", request("e2e", desc("reload", kept)), ok, []string{"OK [reload_rule 7/DAY] remaining=4"}},
		{"and the example domains too", request("edge", desc("remote_address", "203.0.113.7")), over, []string{"OVER_LIMIT [blocked-address 0/SECOND] remaining=0"}},
	})
	m2 := s.metrics(t)
	if hash2 := m2.labelValues("throttlekit_policy_info", "hash"); len(hash2) != 1 || len(hash1) != 1 || hash2[0] != hash1[0] {
		t.Errorf("throttlekit_policy_info hash %q after the broken file, want %q (the policy in use)", hash2, hash1)
	}
	if code, body, err := s.get("/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("GET /readyz with the previous policy in use: %d %q %v; want 200", code, body, err)
	}
	// The operator is told where: the file, its line and the field.
	at := regexp.MustCompile(`e2e\.yaml:\d+$`)
	var found []string
	for _, rec := range s.log.Records("policy error: keeping the previous policy") {
		pos, _ := rec["at"].(string)
		field, _ := rec["field"].(string)
		found = append(found, fmt.Sprintf("at=%q field=%q", pos, field))
		if at.MatchString(pos) && strings.Contains(field, "unit") {
			return
		}
	}
	t.Errorf(`no "policy error" log line names e2e.yaml:LINE and the unit field; found %q`, found)
}
