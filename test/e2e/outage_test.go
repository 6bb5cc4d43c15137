package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
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
// fails: each answer must be its policy's, within answerBound, widened by
// twice the most this process's timers fired late meanwhile (the sidecar's
// store timeout fires late on a loaded machine, and the test reads the
// answer late, by about as much). It returns what it found wrong, for the
// caller to report or, when the failure ended before the checks did, to
// set aside; and the span the checks took.
func checkFallbacks(t *testing.T, s *sidecar, rounds int) (problems []string, took time.Duration) {
	t.Helper()
	type answer struct {
		key   string
		round int
		took  time.Duration
	}
	var answers []answer
	meter := testenv.MeasureLateness()
	began := time.Now()
	for round := 1; round <= rounds; round++ {
		for _, c := range storeErrorCases {
			start := time.Now()
			resp, err := s.call(request("e2e", desc(c.key, unique(t, fmt.Sprint(c.key, round, began.UnixNano())))))
			answers = append(answers, answer{c.key, round, time.Since(start)})
			switch {
			case status.Code(err) != c.code:
				problems = append(problems, fmt.Sprintf("%s, round %d: error %v (code %v), want code %v", c.key, round, err, status.Code(err), c.code))
			case err == nil && resp.GetOverallCode() != c.overall:
				problems = append(problems, fmt.Sprintf("%s, round %d: overall %v, want %v (its on_store_error policy): %v", c.key, round, resp.GetOverallCode(), c.overall, resp))
			}
		}
	}
	took = time.Since(began)
	late := meter.End()
	bound := answerBound + 2*late
	var slowest time.Duration
	for _, a := range answers {
		slowest = max(slowest, a.took)
		if a.took > bound {
			problems = append(problems, fmt.Sprintf("%s, round %d: answered in %v, want under %v (store timeout %v, plus 250 ms, plus twice the %v this process's timers fired late; load average %s)",
				a.key, a.round, a.took, bound, storeTimeout, late, testenv.LoadAverage()))
		}
	}
	t.Logf("slowest answer with the store failing: %v (bound %v; timers up to %v late)", slowest, bound, late)
	return problems, took
}

// runFromRedis runs fromRedis's steps on values of tag. They are store
// calls the test does not measure, made under the default 50 ms store
// timeout that the outage cases measure: a loaded machine can miss it, and
// then on_store_error answers and the steps judge nothing. A run in which a
// check's store call failed (throttlekit_store_errors_total{op="check"}
// grew) says so and is made again on new values; only judgeAttempts such
// runs fail, naming the load each saw. Wrong answers with every store call
// succeeding fail at once.
func runFromRedis(t *testing.T, s *sidecar, tag string) {
	t.Helper()
	var spoiled []string
	for attempt := 1; attempt <= judgeAttempts; attempt++ {
		before := s.metrics(t).get("throttlekit_store_errors_total", "op", "check")
		wrong := stepMismatches(s, fromRedis(t, fmt.Sprint(tag, attempt)))
		failed := s.metrics(t).get("throttlekit_store_errors_total", "op", "check") - before
		if failed == 0 {
			for _, w := range wrong {
				t.Error(w)
			}
			return
		}
		spoiled = append(spoiled, fmt.Sprintf("%v store calls failed (load average %s)", failed, testenv.LoadAverage()))
		t.Logf("%s, run %d: %s with Redis up, so on_store_error answered and nothing is judged (%d answers off); again on new values", tag, attempt, spoiled[len(spoiled)-1], len(wrong))
	}
	t.Errorf("%s: in each of %d runs of the steps a store call failed with Redis up: %s", tag, judgeAttempts, strings.Join(spoiled, "; "))
}

// stepMismatches is runSteps reporting instead of failing: a line for each
// call whose answer differs from its step's.
func stepMismatches(s *sidecar, steps []step) []string {
	var wrong []string
	for i, st := range steps {
		resp, err := s.call(st.req)
		if err != nil {
			wrong = append(wrong, fmt.Sprintf("step %d (%s): %v", i+1, st.what, err))
			continue
		}
		got := make([]string, len(resp.GetStatuses()))
		for j, ds := range resp.GetStatuses() {
			got[j] = statusLine(ds)
		}
		if resp.GetOverallCode() != st.overall || strings.Join(got, "\n") != strings.Join(st.statuses, "\n") {
			wrong = append(wrong, fmt.Sprintf("step %d (%s):\n got overall %v, statuses\n\t%s\nwant overall %v, statuses\n\t%s",
				i+1, st.what, resp.GetOverallCode(), strings.Join(got, "\n\t"), st.overall, strings.Join(st.statuses, "\n\t")))
		}
	}
	return wrong
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

// storeUp is a poll condition: throttlekit_store_up is want.
func storeUp(t *testing.T, s *sidecar, want float64) func() (bool, string) {
	return func() (bool, string) {
		got := s.metrics(t).get("throttlekit_store_up")
		return got == want, fmt.Sprintf("throttlekit_store_up %v", got)
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
// its on_store_error policy within the store timeout, throttlekit_store_up
// turns 0 and /readyz stays 200 (the sidecar answers); once Redis is back
// (empty), store_up is 1 and Redis decides again within a second. That second is judged in wall time: a restart the load made
// slower (the time is logged with how late this process's own timers
// fired) is made again, and only judgeAttempts slow ones fail, naming the
// load each saw. Never deciding again fails at once.
func testRedisOutage(t *testing.T, o options) {
	r := testenv.StartRedis(t)
	o.redisURL = r.URL()
	s := startSidecar(t, o)
	runFromRedis(t, s, "before")

	var slow []string
	for attempt := 1; ; attempt++ {
		killRedis(t, r, s)
		r.Restart()
		meter := testenv.MeasureLateness()
		restarted := time.Now()
		// Far past the second judged: a sidecar that never decides again
		// is told from a slow one.
		waitFor(t, startDeadline, "throttlekit_store_up 1 after Redis restarted", storeUp(t, s, 1))
		ready := time.Since(restarted)
		waitFor(t, startDeadline, "Redis deciding again after its restart (outage_deny still falls back)", redisDecides(t, s))
		decides := time.Since(restarted)
		late := meter.End()
		t.Logf("after the restart: store_up 1 in %v, Redis deciding in %v (timers up to %v late, load average %s)", ready, decides, late, testenv.LoadAverage())
		if decides <= time.Second {
			break
		}
		slow = append(slow, fmt.Sprintf("%v with timers up to %v late, load average %s", decides, late, testenv.LoadAverage()))
		if attempt == judgeAttempts {
			t.Fatalf("Redis deciding again more than 1s after its restart, in %d restarts: %s", attempt, strings.Join(slow, "; "))
		}
		t.Logf("restart %d: Redis decided again only %v after it, want ≤ 1s; killing and restarting again", attempt, decides)
	}
	runFromRedis(t, s, "after")
}

// killRedis kills r under s: every on_store_error rule answers by its
// policy within the store timeout, throttlekit_store_up turns 0 while
// /readyz stays 200 naming the outage (readiness means the sidecar
// answers: issue 42, item 3), and the store metrics count the failed
// checks.
func killRedis(t *testing.T, r *testenv.Redis, s *sidecar) {
	t.Helper()
	before := s.metrics(t)
	r.Kill()
	problems, _ := checkFallbacks(t, s, 3)
	for _, p := range problems {
		t.Error(p)
	}
	waitFor(t, 2*time.Second, "throttlekit_store_up 0 with Redis down", storeUp(t, s, 0))
	if code, body, err := s.get("/readyz"); err != nil || code != http.StatusOK || !strings.Contains(body, "store unreachable") {
		t.Errorf("GET /readyz with Redis down: %d %q %v; want 200 naming the store's outage", code, body, err)
	}
	after := s.metrics(t)
	for _, rule := range []string{"outage_allow", "outage_deny"} {
		if got := after.get("throttlekit_store_fallbacks_total", "domain", "e2e", "rule", rule) -
			before.get("throttlekit_store_fallbacks_total", "domain", "e2e", "rule", rule); got != 3 {
			t.Errorf("throttlekit_store_fallbacks_total of %s grew by %v over 3 failed checks, want 3", rule, got)
		}
	}
	if got := after.get("throttlekit_store_errors_total", "op", "check") - before.get("throttlekit_store_errors_total", "op", "check"); got < 9 {
		t.Errorf(`throttlekit_store_errors_total{op="check"} grew by %v over 9 failed checks, want ≥ 9`, got)
	}
}

// testRedisStall pauses Redis (CLIENT PAUSE: connections stay open, no
// command is answered), the failure a kill does not show: the store calls
// time out rather than fail at once. Every rule must still answer by its
// on_store_error policy within the store timeout, "error" as UNAVAILABLE.
// The checks must end within the pause: on a machine so loaded that they
// outlast it, what they saw is not judged (the pause ended under them); the
// test says so, pauses again, and only judgeAttempts such runs fail.
func testRedisStall(t *testing.T, o options) {
	r := testenv.StartRedis(t)
	o.redisURL = r.URL()
	s := startSidecar(t, o)
	runFromRedis(t, s, "before")

	const pause = 2 * time.Second
	var outlasted []string
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), callDeadline)
		err := r.Client().Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err()
		cancel()
		if err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
		paused := time.Now()
		problems, took := checkFallbacks(t, s, 2)
		code, body, err := s.get("/readyz")
		if since := time.Since(paused); since <= pause {
			for _, p := range problems {
				t.Error(p)
			}
			if err != nil || code != http.StatusOK {
				t.Errorf("GET /readyz with Redis paused: %d %q %v; want 200 (the sidecar answers)", code, body, err)
			}
			break
		}
		outlasted = append(outlasted, fmt.Sprintf("checks %v, /readyz %v after the pause began (load average %s)", took, time.Since(paused), testenv.LoadAverage()))
		if attempt == judgeAttempts {
			t.Fatalf("the checks outlasted the %v pause in %d runs, so nothing was tested: %s", pause, attempt, strings.Join(outlasted, "; "))
		}
		t.Logf("run %d: the checks outlasted the %v pause (%s), so what they saw is not judged (%d answers off); pausing again",
			attempt, pause, outlasted[len(outlasted)-1], len(problems))
		waitFor(t, pause+time.Second, "Redis deciding again after the pause", redisDecides(t, s))
	}
	waitFor(t, pause+time.Second, "Redis deciding again after the pause", redisDecides(t, s))
	waitFor(t, time.Second, "GET /readyz 200 after the pause", readyz(s, http.StatusOK))
	runFromRedis(t, s, "after")
}
