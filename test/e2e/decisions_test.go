package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The overall codes, short.
const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// testStatuses walks one limit (5 a day) to its end: every status carries
// the limit that decided (name, unit, requests_per_unit), what it has left,
// and the time to the end of the UTC day.
func testStatuses(t *testing.T, s *sidecar) {
	v := unique(t, "a")
	for i := 1; i <= 6; i++ {
		before := time.Now()
		resp := s.should(t, request("e2e", desc("account", v)))
		after := time.Now()
		want, wantOverall := fmt.Sprintf("OK [account_daily 5/DAY] remaining=%d", 5-i), ok
		if i == 6 {
			want, wantOverall = "OVER_LIMIT [account_daily 5/DAY] remaining=0", over
		}
		if len(resp.GetStatuses()) != 1 {
			t.Fatalf("call %d: %d statuses for 1 descriptor: %v", i, len(resp.GetStatuses()), resp)
		}
		st := resp.GetStatuses()[0]
		if got := statusLine(st); got != want || resp.GetOverallCode() != wantOverall {
			t.Errorf("call %d: overall %v, status %q; want %v, %q", i, resp.GetOverallCode(), got, wantOverall, want)
		}
		if st.GetDurationUntilReset() == nil {
			t.Errorf("call %d: no duration_until_reset in %v", i, st)
			continue
		}
		checkUntilReset(t, fmt.Sprintf("call %d", i), st.GetDurationUntilReset().AsDuration(), day, before, after)
	}
}

// testResponseHeaders checks RateLimit-Limit, -Remaining and -Reset: they
// describe the status closest to its limit (hdr's 5 a day, not generous's
// 100), and follow it to OVER_LIMIT.
func testResponseHeaders(t *testing.T, s *sidecar) {
	v := unique(t, "h")
	req := request("e2e", desc("generous", v), desc("hdr", v))
	for i := 1; i <= 6; i++ {
		before := time.Now()
		resp := s.should(t, req)
		after := time.Now()
		headers := map[string][]string{}
		for _, h := range resp.GetResponseHeadersToAdd() {
			headers[h.GetKey()] = append(headers[h.GetKey()], h.GetValue())
		}
		remaining := strconv.Itoa(max(5-i, 0))
		want := map[string]string{"RateLimit-Limit": "5, 5;w=86400", "RateLimit-Remaining": remaining}
		if len(headers) != 3 {
			t.Errorf("call %d: headers %v, want exactly RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset", i, headers)
		}
		for name, value := range want {
			if got := headers[name]; len(got) != 1 || got[0] != value {
				t.Errorf("call %d: header %s = %q, want [%q]", i, name, got, value)
			}
		}
		reset := headers["RateLimit-Reset"]
		if len(reset) != 1 {
			t.Errorf("call %d: RateLimit-Reset = %q, want one value", i, reset)
			continue
		}
		secs, err := strconv.ParseInt(reset[0], 10, 64)
		if err != nil {
			t.Errorf("call %d: RateLimit-Reset %q is not whole seconds: %v", i, reset[0], err)
			continue
		}
		// Whole seconds, rounded up, to the end of the UTC day.
		lo := int64((windowEnd(after, day).Sub(after) + time.Second - 1) / time.Second)
		hi := int64((windowEnd(before, day).Sub(before) + time.Second - 1) / time.Second)
		if secs < lo-1 || secs > hi {
			t.Errorf("call %d: RateLimit-Reset %d, want %d..%d (seconds left in the UTC day, rounded up)", i, secs, lo, hi)
		}
		if i == 6 && resp.GetOverallCode() != over {
			t.Errorf("call 6: overall %v, want OVER_LIMIT (hdr allows 5 a day)", resp.GetOverallCode())
		}
	}
}

// testNested checks descriptors of two entries: (tenant acme, user) has its
// own rule, every other tenant the key-only one; a rule applies only at the
// depth it is written at.
func testNested(t *testing.T, s *sidecar) {
	u, other := unique(t, "u"), unique(t, "tenant")
	before := s.metrics(t)
	runSteps(t, s, []step{
		{"acme's user, 1st", request("e2e", desc("tenant", "acme", "user", u)), ok, []string{"OK [2/DAY] remaining=1"}},
		{"acme's user, 2nd", request("e2e", desc("tenant", "acme", "user", u)), ok, []string{"OK [2/DAY] remaining=0"}},
		{"acme's user, 3rd: over", request("e2e", desc("tenant", "acme", "user", u)), over, []string{"OVER_LIMIT [2/DAY] remaining=0"}},
		{"another tenant's user: the key-only rule", request("e2e", desc("tenant", other, "user", u)), ok, []string{"OK [10/DAY] remaining=9"}},
		{"tenant alone: no rule at depth 1", request("e2e", desc("tenant", "acme")), ok, []string{"OK [] remaining=0"}},
		{"three entries: no rule at depth 3", request("e2e", desc("tenant", "acme", "user", u, "device", u)), ok, []string{"OK [] remaining=0"}},
	})
	after := s.metrics(t)
	wantGrowth(t, `decisions of "tenant_acme.user"`, before.decisions("e2e", "tenant_acme.user"), after.decisions("e2e", "tenant_acme.user"),
		map[string]float64{"ok": 2, "near_limit": 1, "over_limit": 1})
	wantGrowth(t, `decisions of "tenant.user"`, before.decisions("e2e", "tenant.user"), after.decisions("e2e", "tenant.user"),
		map[string]float64{"ok": 1})
}

// testWildcards checks a '*' in the middle of a value: /api/*/items gives
// each matching path a counter of its own, /shared/*/feed (share_threshold)
// one counter for all.
func testWildcards(t *testing.T, s *sidecar) {
	p := func(format string) *rlsv3.RateLimitRequest {
		return request("e2e", desc("path", fmt.Sprintf(format, unique(t, "x"))))
	}
	runSteps(t, s, []step{
		{"a matching path, 1st", p("/api/%s/items"), ok, []string{"OK [2/DAY] remaining=1"}},
		{"a matching path, 2nd", p("/api/%s/items"), ok, []string{"OK [2/DAY] remaining=0"}},
		{"a matching path, 3rd: over", p("/api/%s/items"), over, []string{"OVER_LIMIT [2/DAY] remaining=0"}},
		{"another matching path counts apart", p("/api/%s-2/items"), ok, []string{"OK [2/DAY] remaining=1"}},
		{"the * may span slashes", p("/api/v1/%s/items"), ok, []string{"OK [2/DAY] remaining=1"}},
		{"the suffix must match", p("/api/%s/items/more"), ok, []string{"OK [] remaining=0"}},
		{"the prefix must match", p("/v2/api/%s/items"), ok, []string{"OK [] remaining=0"}},
		{"shared, path a", p("/shared/%s-a/feed"), ok, []string{"OK [3/DAY] remaining=2"}},
		{"shared, path b: same counter", p("/shared/%s-b/feed"), ok, []string{"OK [3/DAY] remaining=1"}},
		{"shared, empty middle", request("e2e", desc("path", "/shared//feed")), ok, []string{"OK [3/DAY] remaining=0"}},
		{"shared, path c: over", p("/shared/%s-c/feed"), over, []string{"OVER_LIMIT [3/DAY] remaining=0"}},
	})
}

// testHitsAddend checks the request's hits_addend and a descriptor's own,
// which wins; a cost above what is left is denied whole and takes nothing.
// An over-limit status reports 0 remaining, as envoyproxy/ratelimit's does.
func testHitsAddend(t *testing.T, s *sidecar) {
	v, w, x := unique(t, "v"), unique(t, "w"), unique(t, "x")
	runSteps(t, s, []step{
		{"request adds 3", addend(3, request("e2e", desc("cost", v))), ok, []string{"OK [10/DAY] remaining=7"}},
		{"descriptor's 5 beats the request's 3", addend(3, request("e2e", hits(5, desc("cost", v)))), ok, []string{"OK [10/DAY] remaining=2"}},
		{"3 more than the 2 left: denied", addend(3, request("e2e", desc("cost", v))), over, []string{"OVER_LIMIT [10/DAY] remaining=0"}},
		{"the denial took nothing: exactly the 2 left", request("e2e", hits(2, desc("cost", v))), ok, []string{"OK [10/DAY] remaining=0"}},
		{"default 1: over", request("e2e", desc("cost", v)), over, []string{"OVER_LIMIT [10/DAY] remaining=0"}},
		{"two descriptors, each its own addend", addend(2, request("e2e", hits(4, desc("cost", w)), desc("cost", x))), ok,
			[]string{"OK [10/DAY] remaining=6", "OK [10/DAY] remaining=8"}},
	})
}

// testShadowMode checks a shadow rule over its limit: the answer is OK,
// and /metrics counts the denial as shadow, not over_limit.
func testShadowMode(t *testing.T, s *sidecar) {
	v := unique(t, "v")
	before := s.metrics(t)
	runSteps(t, s, []step{
		{"within the limit", request("e2e", desc("shadowed", v)), ok, []string{"OK [shadow_rule 1/DAY] remaining=0"}},
		{"over the limit, yet OK", request("e2e", desc("shadowed", v)), ok, []string{"OK [shadow_rule 1/DAY] remaining=0"}},
		{"still OK", request("e2e", desc("shadowed", v)), ok, []string{"OK [shadow_rule 1/DAY] remaining=0"}},
	})
	after := s.metrics(t)
	wantGrowth(t, "decisions of shadow_rule", before.decisions("e2e", "shadow_rule"), after.decisions("e2e", "shadow_rule"),
		map[string]float64{"ok": 1, "near_limit": 1, "shadow": 2})
}

// testReplaces checks that vip_limit, when it applies, removes caller_base
// from the request: caller_base neither decides nor counts.
func testReplaces(t *testing.T, s *sidecar) {
	v, w := unique(t, "v"), unique(t, "w")
	runSteps(t, s, []step{
		{"caller alone, 1st", request("e2e", desc("caller", v)), ok, []string{"OK [caller_base 1/DAY] remaining=0"}},
		{"caller alone, 2nd: over", request("e2e", desc("caller", v)), over, []string{"OVER_LIMIT [caller_base 1/DAY] remaining=0"}},
		{"caller with vip: caller_base replaced", request("e2e", desc("caller", w), desc("vip", w)), ok,
			[]string{"OK [] remaining=0", "OK [vip_limit 5/DAY] remaining=4"}},
		{"again", request("e2e", desc("caller", w), desc("vip", w)), ok,
			[]string{"OK [] remaining=0", "OK [vip_limit 5/DAY] remaining=3"}},
		{"caller alone: caller_base was not counted", request("e2e", desc("caller", w)), ok, []string{"OK [caller_base 1/DAY] remaining=0"}},
		{"with vip, an exhausted caller_base does not deny", request("e2e", desc("caller", w), desc("vip", w)), ok,
			[]string{"OK [] remaining=0", "OK [vip_limit 5/DAY] remaining=2"}},
	})
}

// testSeveralLimits checks rate_limits: both limits apply, the status shows
// the one closest to its limit, and a request one of them denies takes
// nothing from the other.
func testSeveralLimits(t *testing.T, s *sidecar) {
	v := unique(t, "v")
	before := s.metrics(t)
	runSteps(t, s, []step{
		// 4 fits multi_year (4) but not multi_day (3): denied whole. The
		// cost is the request's hits_addend: a descriptor's own is a charge,
		// counted even when denied, as upstream counts it (check, then
		// charge), and testChargeCountsWhenDenied holds that.
		{"4 units: multi_day denies", addend(4, request("e2e", desc("multi", v))), over, []string{"OVER_LIMIT [multi_day 3/DAY] remaining=0"}},
		// Had the denial taken 4 from multi_year, this would be over.
		{"1 unit: multi_year kept its 4", request("e2e", desc("multi", v)), ok, []string{"OK [multi_day 3/DAY] remaining=2"}},
		{"2 units", addend(2, request("e2e", desc("multi", v))), ok, []string{"OK [multi_day 3/DAY] remaining=0"}},
		{"1 unit: multi_day over", request("e2e", desc("multi", v)), over, []string{"OVER_LIMIT [multi_day 3/DAY] remaining=0"}},
	})
	after := s.metrics(t)
	wantGrowth(t, "decisions of multi_day", before.decisions("e2e", "multi_day"), after.decisions("e2e", "multi_day"),
		map[string]float64{"ok": 2, "near_limit": 1, "over_limit": 2})
	wantGrowth(t, "decisions of multi_year", before.decisions("e2e", "multi_year"), after.decisions("e2e", "multi_year"),
		map[string]float64{"ok": 4})
}

// testChargeCountsWhenDenied checks a descriptor's own hits_addend as
// envoyproxy/ratelimit takes it: a charge, counted in every limit even
// when one of them denies the request.
func testChargeCountsWhenDenied(t *testing.T, s *sidecar) {
	v := unique(t, "v")
	runSteps(t, s, []step{
		{"a charge of 4: multi_day overruns, multi_year counts it", request("e2e", hits(4, desc("multi", v))), over, []string{"OVER_LIMIT [multi_day 3/DAY] remaining=0"}},
		{"so multi_year has nothing left", request("e2e", desc("multi", v)), over, []string{"OVER_LIMIT [multi_year 4/YEAR] remaining=0"}},
	})
}

// testDenialConsumesNothing checks a request that one descriptor denies:
// the other descriptor's generous limit keeps what the request took.
func testDenialConsumesNothing(t *testing.T, s *sidecar) {
	v := unique(t, "v")
	runSteps(t, s, []step{
		{"both admit", request("e2e", desc("generous", v), desc("scarce", v)), ok,
			[]string{"OK [generous 100/DAY] remaining=99", "OK [scarce 1/DAY] remaining=0"}},
		{"scarce denies: generous gets its unit back", request("e2e", desc("generous", v), desc("scarce", v)), over,
			[]string{"OK [generous 100/DAY] remaining=99", "OVER_LIMIT [scarce 1/DAY] remaining=0"}},
		{"denied again", request("e2e", desc("generous", v), desc("scarce", v)), over,
			[]string{"OK [generous 100/DAY] remaining=99", "OVER_LIMIT [scarce 1/DAY] remaining=0"}},
		{"generous alone: only the admitted request counted", request("e2e", desc("generous", v)), ok,
			[]string{"OK [generous 100/DAY] remaining=98"}},
	})
}
