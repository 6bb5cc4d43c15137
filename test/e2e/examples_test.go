package e2e

import (
	"testing"
	"time"
)

// testExamplePolicies checks rules of the example policies in config/, as
// their comments describe them.
func testExamplePolicies(t *testing.T, s *sidecar) {
	t.Run("edge", func(t *testing.T) {
		// The exact value 203.0.113.7 wins over the key-only per-address rule,
		// and requests_per_unit 0 denies every request.
		for i := 1; i <= 2; i++ {
			resp := s.should(t, request("edge", desc("remote_address", "203.0.113.7")))
			if resp.GetOverallCode() != over || len(resp.GetStatuses()) != 1 ||
				statusLine(resp.GetStatuses()[0]) != "OVER_LIMIT [blocked-address 0/SECOND] remaining=0" {
				t.Errorf("blocked address, call %d: %v; want OVER_LIMIT [blocked-address 0/SECOND] remaining=0", i, resp)
				continue
			}
			if d := resp.GetStatuses()[0].GetDurationUntilReset().AsDuration(); d < 0 || d > time.Second {
				t.Errorf("blocked address: duration_until_reset %v, want the rest of a one-second window", d)
			}
		}
		// Any other address gets per-address (GCRA, leased in batches of
		// 10): the first check leases, the next four are served locally.
		before := s.metrics(t)
		for i := 1; i <= 5; i++ {
			resp := s.should(t, request("edge", desc("remote_address", "198.51.100.23")))
			l := resp.GetStatuses()[0].GetCurrentLimit()
			if resp.GetOverallCode() != ok || l.GetName() != "per-address" || l.GetRequestsPerUnit() != 100 || l.GetUnit().String() != "SECOND" {
				t.Errorf("another address, call %d: %v; want OK from per-address, 100/SECOND", i, resp)
			}
		}
		after := s.metrics(t)
		for _, c := range []struct {
			name string
			min  float64
		}{{"throttlekit_leases_granted_total", 1}, {"throttlekit_local_hits_total", 4}} {
			if got := after.get(c.name, "domain", "edge", "rule", "per-address") - before.get(c.name, "domain", "edge", "rule", "per-address"); got < c.min {
				t.Errorf("%s of per-address (leased, batch 10) grew by %v over 5 checks, want ≥ %v", c.name, got, c.min)
			}
		}
		// Health checks are never limited. As envoyproxy/ratelimit answers
		// an unlimited rule: OK, remaining 2^32-1, no current_limit, so no
		// RateLimit-* headers describe it.
		for i := 1; i <= 3; i++ {
			resp := s.should(t, request("edge", desc("path", "/healthz")))
			if resp.GetOverallCode() != ok || statusLine(resp.GetStatuses()[0]) != "OK [] remaining=4294967295" {
				t.Errorf("/healthz (unlimited), call %d: %s; want OK [] remaining=4294967295", i, statusLine(resp.GetStatuses()[0]))
			}
			if h := resp.GetResponseHeadersToAdd(); len(h) != 0 {
				t.Errorf("/healthz (unlimited), call %d: headers %v describe no limit; want none", i, h)
			}
		}
	})
	t.Run("api", func(t *testing.T) {
		u := unique(t, "user")
		// Exports: 2 per hour per user, on (user_id, path) descriptors.
		export := request("api", desc("user_id", u, "path", "/v1/export"))
		runSteps(t, s, []step{
			{"1st export", export, ok, []string{"OK [export 2/HOUR] remaining=1"}},
			{"2nd export", export, ok, []string{"OK [export 2/HOUR] remaining=0"}},
			{"3rd export: over", export, over, []string{"OVER_LIMIT [export 2/HOUR] remaining=0"}},
		})
		// A user alone gets user-burst (a bucket of 20) and user-daily (1000):
		// the status shows the closer, user-burst. With plan enterprise in the
		// request, enterprise-daily replaces user-daily, which then neither
		// decides nor counts.
		v := unique(t, "enterprise-user")
		before := s.metrics(t)
		runSteps(t, s, []step{
			{"enterprise user", request("api", desc("user_id", v), desc("plan", "enterprise")), ok,
				[]string{"OK [user-burst 10/SECOND] remaining=19", "OK [enterprise-daily 100000/DAY] remaining=99999"}},
		})
		after := s.metrics(t)
		wantGrowth(t, "decisions of user-daily (replaced)", before.decisions("api", "user-daily"), after.decisions("api", "user-daily"), nil)
		wantGrowth(t, "decisions of enterprise-daily", before.decisions("api", "enterprise-daily"), after.decisions("api", "enterprise-daily"),
			map[string]float64{"ok": 1})
		// The bucket refills 10 a second: 18 left, or 19 if 100ms passed.
		resp := s.should(t, request("api", desc("user_id", v)))
		if got := statusLine(resp.GetStatuses()[0]); got != "OK [user-burst 10/SECOND] remaining=18" && got != "OK [user-burst 10/SECOND] remaining=19" {
			t.Errorf("the same user alone: %s; want OK [user-burst 10/SECOND] remaining=18 (or 19)", got)
		}
		wantGrowth(t, "decisions of user-daily (alone)", after.decisions("api", "user-daily"), s.metrics(t).decisions("api", "user-daily"),
			map[string]float64{"ok": 1})
	})
}
