package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
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
		// Leased GCRA credits decay as the store's bucket drains, 100 a
		// second: the fifth check finds a credit only within 50 ms of the
		// lease. Five checks a loaded machine spreads wider take more
		// leases, as they should (3 local hits beside a second make
		// test): such a run says so and is made again on another address.
		for attempt := 1; ; attempt++ {
			addr := fmt.Sprintf("198.51.100.%d", 22+attempt)
			before := s.metrics(t)
			began := time.Now()
			for i := 1; i <= 5; i++ {
				resp := s.should(t, request("edge", desc("remote_address", addr)))
				l := resp.GetStatuses()[0].GetCurrentLimit()
				if resp.GetOverallCode() != ok || l.GetName() != "per-address" || l.GetRequestsPerUnit() != 100 || l.GetUnit().String() != "SECOND" {
					t.Errorf("another address, call %d: %v; want OK from per-address, 100/SECOND", i, resp)
				}
			}
			took := time.Since(began)
			after := s.metrics(t)
			grew := func(name string) float64 {
				return after.get(name, "domain", "edge", "rule", "per-address") - before.get(name, "domain", "edge", "rule", "per-address")
			}
			leases, local := grew("throttlekit_leases_granted_total"), grew("throttlekit_local_hits_total")
			if leases < 1 || leases+local < 5 {
				t.Errorf("per-address (leased, batch 10): %v leases and %v local hits over 5 checks, want a lease and every check counted", leases, local)
			}
			if local >= 4 {
				break
			}
			if took <= 50*time.Millisecond || attempt == judgeAttempts {
				t.Errorf("throttlekit_local_hits_total of per-address (leased, batch 10) grew by %v over 5 checks in %v, want ≥ 4 (load %s, attempt %d)", local, took, testenv.LoadAverage(), attempt)
				break
			}
			t.Logf("per-address: %v local hits over 5 checks that took %v, past the 50 ms its credits last (load %s); again on another address", local, took, testenv.LoadAverage())
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
