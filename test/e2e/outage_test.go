package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// answerBound is the longest a check may take while the store fails: the
// store timeout, plus room for the process and a busy CI machine.
const answerBound = storeTimeout + 250*time.Millisecond

// storeErrorCase is one on_store_error policy and the answer it gives
// while the store fails.
type storeErrorCase struct {
	key     string
	overall rlsv3.RateLimitResponse_Code // for allow and deny
	code    codes.Code                   // the gRPC code; OK for allow and deny
}

var storeErrorCases = []storeErrorCase{
	{"outage_allow", ok, codes.OK},
	{"outage_deny", over, codes.OK},
	{"outage_error", 0, codes.Unavailable},
}

// checkFallbacks asks each on_store_error rule rounds times while the store
// fails: each answer must be its policy's, within answerBound.
func checkFallbacks(t *testing.T, s *sidecar, rounds int) {
	t.Helper()
	var slowest time.Duration
	defer func() { t.Logf("slowest answer with the store failing: %v", slowest) }()
	for round := 1; round <= rounds; round++ {
		for _, c := range storeErrorCases {
			start := time.Now()
			resp, err := s.call(request("e2e", desc(c.key, unique(t, fmt.Sprint(c.key, round)))))
			took := time.Since(start)
			slowest = max(slowest, took)
			switch {
			case status.Code(err) != c.code:
				t.Errorf("%s, round %d: error %v (code %v), want code %v", c.key, round, err, status.Code(err), c.code)
			case err == nil && resp.GetOverallCode() != c.overall:
				t.Errorf("%s, round %d: overall %v, want %v (its on_store_error policy): %v", c.key, round, resp.GetOverallCode(), c.overall, resp)
			}
			if took > answerBound {
				t.Errorf("%s, round %d: answered in %v, want under %v (store timeout %v)", c.key, round, took, answerBound, storeTimeout)
			}
		}
	}
}

// fromRedis are the answers when Redis decides, on fresh values: the first
// of each rule's window.
func fromRedis(t *testing.T, tag string) []step {
	return []step{
		{"allow, 1st", request("e2e", desc("outage_allow", unique(t, tag))), ok, []string{"OK [2/DAY] remaining=1"}},
		{"allow, 2nd", request("e2e", desc("outage_allow", unique(t, tag))), ok, []string{"OK [2/DAY] remaining=0"}},
		// allow's fallback would say OK here.
		{"allow, 3rd: over", request("e2e", desc("outage_allow", unique(t, tag))), over, []string{"OVER_LIMIT [2/DAY] remaining=0"}},
		// deny's fallback would say OVER_LIMIT.
		{"deny", request("e2e", desc("outage_deny", unique(t, tag))), ok, []string{"OK [100/DAY] remaining=99"}},
		{"error", request("e2e", desc("outage_error", unique(t, tag))), ok, []string{"OK [100/DAY] remaining=99"}},
	}
}

// readyz is a poll condition: GET /readyz answers want.
func readyz(s *sidecar, want int) func() (bool, string) {
	return func() (bool, string) {
		code, body, err := s.get("/readyz")
		return err == nil && code == want, fmt.Sprintf("status %d, body %q, error %v", code, body, err)
	}
}

// redisDecides is a poll condition: a fresh outage_deny value gets OK, which
// only Redis answers (deny's fallback is OVER_LIMIT).
func redisDecides(t *testing.T, s *sidecar) func() (bool, string) {
	n := 0
	return func() (bool, string) {
		n++
		resp, err := s.call(request("e2e", desc("outage_deny", unique(t, fmt.Sprint("probe", n)))))
		if err != nil {
			return false, err.Error()
		}
		return resp.GetOverallCode() == ok, resp.String()
	}
}

// testRedisOutage kills Redis under a running sidecar: every rule answers by
// its on_store_error policy within the store timeout and /readyz turns 503;
// once Redis is back (empty), /readyz is 200 and Redis decides again within
// a second.
func testRedisOutage(t *testing.T, o options) {
	r := testenv.StartRedis(t)
	o.redisURL = r.URL()
	s := startSidecar(t, o)
	runSteps(t, s, fromRedis(t, "before"))
	before := s.metrics(t)

	r.Kill()
	checkFallbacks(t, s, 3)
	waitFor(t, 2*time.Second, "GET /readyz answers 503 with Redis down", readyz(s, http.StatusServiceUnavailable))
	after := s.metrics(t)
	if got := after.get("throttlekit_store_up"); got != 0 {
		t.Errorf("throttlekit_store_up = %v after /readyz found Redis down, want 0", got)
	}
	for _, rule := range []string{"outage_allow", "outage_deny"} {
		if got := after.get("throttlekit_store_fallbacks_total", "domain", "e2e", "rule", rule) -
			before.get("throttlekit_store_fallbacks_total", "domain", "e2e", "rule", rule); got != 3 {
			t.Errorf("throttlekit_store_fallbacks_total of %s grew by %v over 3 failed checks, want 3", rule, got)
		}
	}
	if got := after.get("throttlekit_store_errors_total", "op", "check") - before.get("throttlekit_store_errors_total", "op", "check"); got < 9 {
		t.Errorf(`throttlekit_store_errors_total{op="check"} grew by %v over 9 failed checks, want ≥ 9`, got)
	}

	r.Restart()
	restarted := time.Now()
	ready, isReady, why := poll(time.Second, readyz(s, http.StatusOK))
	if !isReady {
		t.Errorf("GET /readyz not 200 within 1s of Redis restarting; last: %s", why)
	}
	decides, redisBack, why := poll(time.Second-time.Since(restarted), redisDecides(t, s))
	if !redisBack {
		t.Fatalf("Redis not deciding within 1s of its restart (outage_deny still falls back); last: %s", why)
	}
	t.Logf("after the restart: /readyz 200 in %v, Redis deciding %v after it", ready, decides)
	runSteps(t, s, fromRedis(t, "after"))
}

// testRedisStall pauses Redis (CLIENT PAUSE: connections stay open, no
// command is answered), the failure a kill does not show: the store calls
// time out rather than fail at once. Every rule must still answer by its
// on_store_error policy within the store timeout, "error" as UNAVAILABLE.
func testRedisStall(t *testing.T, o options) {
	r := testenv.StartRedis(t)
	o.redisURL = r.URL()
	s := startSidecar(t, o)
	runSteps(t, s, fromRedis(t, "before"))

	const pause = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
	defer cancel()
	if err := r.Client().Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	paused := time.Now()
	checkFallbacks(t, s, 2)
	if code, body, err := s.get("/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz with Redis paused: %d %q %v; want 503", code, body, err)
	}
	if time.Since(paused) > pause {
		t.Fatalf("the checks outlasted the %v pause: nothing was tested", pause)
	}
	waitFor(t, pause+time.Second, "Redis deciding again after the pause", redisDecides(t, s))
	waitFor(t, time.Second, "GET /readyz 200 after the pause", readyz(s, http.StatusOK))
	runSteps(t, s, fromRedis(t, "after"))
}
