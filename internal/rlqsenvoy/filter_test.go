package rlqsenvoy

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

var (
	bucketA = map[string]string{"name": "a"}
	bucketB = map[string]string{"name": "b", "tenant": "t1"}
)

// The stream opens on the first bucket only; the first request of a bucket
// is decided by no_assignment_behavior and reported at once, time_elapsed 0.
func TestFirstRequestDecidedUnassignedAndReportedAtOnce(t *testing.T) {
	cases := []struct {
		name      string
		noAssign  *typev3.RateLimitStrategy
		allowed   bool
		secondToo bool
	}{
		{"unset is ALLOW_ALL", nil, true, true},
		{"ALLOW_ALL", blanket(true), true, true},
		{"DENY_ALL", blanket(false), false, false},
		{"RequestsPerTimeUnit fails open", rptu(), true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTestServer(t, "")
			f, _ := newTestFilter(t, Config{Domain: "dom", NoAssignment: tc.noAssign}, srv)
			if srv.streams() != 0 || f.Endpoint() != -1 {
				t.Fatal("stream opened before the first request")
			}
			if got := f.Decide(bucketA); got != tc.allowed {
				t.Fatalf("first request allowed = %v, want %v", got, tc.allowed)
			}
			m := srv.next(t)
			if m.GetDomain() != "dom" || len(m.GetBucketQuotaUsages()) != 1 {
				t.Fatalf("immediate report = %v", m)
			}
			var a, d uint64 = 1, 0
			if !tc.allowed {
				a, d = 0, 1
			}
			checkUsage(t, usageOf(t, m, bucketA), a, d, 0)
			if got := f.Decide(bucketA); got != tc.secondToo {
				t.Fatalf("second request allowed = %v, want %v", got, tc.secondToo)
			}
			srv.none(t) // a cached bucket sends nothing
			if srv.streams() != 1 {
				t.Fatalf("streams = %d, want 1", srv.streams())
			}
		})
	}
}

func TestNoAssignmentTokenBucketRefused(t *testing.T) {
	_, err := New(Config{Servers: []string{"127.0.0.1:1"}, NoAssignment: tokenBucketStrategy(1, 1, time.Second)})
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v, want ErrConfig", err)
	}
}

// Every interval every cached bucket is reported, idle ones too, with what
// was allowed and denied since its last report and whole-second time_elapsed.
func TestReportsEveryIntervalForEveryBucket(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(true)}, srv)
	f.Decide(bucketA) // t0: created, timer armed for t0+5
	srv.next(t)
	f.Decide(bucketA)
	clk.Advance(2500 * time.Millisecond)
	f.Decide(bucketB) // t0+2.5: created
	srv.next(t)
	f.Decide(bucketB)
	f.Decide(bucketB)

	m := tick(t, clk, srv) // at t0+5 (the clock reads t0+7.5)
	if len(m.GetBucketQuotaUsages()) != 2 {
		t.Fatalf("report = %v, want both buckets", m)
	}
	checkUsage(t, usageOf(t, m, bucketA), 1, 0, 5)
	checkUsage(t, usageOf(t, m, bucketB), 2, 0, 2) // 2.5 s truncated
	clk.Set(t0.Add(10 * time.Second))
	m = srv.next(t)
	checkUsage(t, usageOf(t, m, bucketA), 0, 0, 5) // idle, still reported
	checkUsage(t, usageOf(t, m, bucketB), 0, 0, 5)
	if s := f.Stats(); s.Messages != 4 || s.ImmediateSent != 2 || s.Ticks != 2 {
		t.Fatalf("stats = %+v", s)
	}
}

// A TokenBucket is Envoy's AtomicTokenBucket: it starts full, a request
// takes one whole token, tokens refill continuously at tokens_per_fill / whole
// seconds of fill_interval.
func TestTokenBucketEnforced(t *testing.T) {
	srv := startTestServer(t, "")
	var seen atomic.Int64
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(false), OnResponse: func(at time.Time, ep int, resp *rlqsv3.RateLimitQuotaResponse) {
		if at.Equal(t0) && ep == 0 && len(resp.GetBucketAction()) == 1 {
			seen.Add(1)
		}
	}}, srv)
	f.Decide(bucketA)
	srv.next(t)
	// fill_interval 2.9 s is 2 whole seconds: 1 token / 2 s.
	srv.respond(t, assign(bucketA, tokenBucketStrategy(5, 1, 2900*time.Millisecond), 60*time.Second))
	waitResponses(t, f, 1)
	if seen.Load() != 1 {
		t.Fatalf("OnResponse saw %d responses, want 1", seen.Load())
	}
	if got := admits(f, bucketA, 10); got != 5 {
		t.Fatalf("admitted %d of 10 on a fresh bucket, want max_tokens 5", got)
	}
	clk.Advance(1999 * time.Millisecond)
	if f.Decide(bucketA) {
		t.Fatal("admitted before a whole token refilled")
	}
	clk.Advance(time.Millisecond)
	if !f.Decide(bucketA) || f.Decide(bucketA) {
		t.Fatal("want exactly one token after 2 s at 0.5/s")
	}
	clk.Advance(DefaultReportInterval) // tick at t0+5 (reports drained below)
	srv.next(t)
	if got := admits(f, bucketA, 10); got != 2 { // 5 s at 0.5/s = 2.5 tokens
		t.Fatalf("admitted %d after 5 s, want 2", got)
	}
}

// A fill_interval under a second divides by zero whole seconds: an infinite
// rate, so the bucket never runs dry (unless max_tokens is 0).
func TestTokenBucketSubSecondIntervalIsUnlimited(t *testing.T) {
	srv := startTestServer(t, "")
	f, _ := newTestFilter(t, Config{NoAssignment: blanket(false)}, srv)
	f.Decide(bucketA)
	srv.next(t)
	srv.respond(t, assign(bucketA, tokenBucketStrategy(2, 1, 500*time.Millisecond), 60*time.Second))
	waitResponses(t, f, 1)
	if got := admits(f, bucketA, 100); got != 100 {
		t.Fatalf("admitted %d of 100, want all", got)
	}
}

// An "equal" TokenBucket (same max_tokens, tokens_per_fill and
// fill_interval.nanos; seconds not compared) keeps the live bucket and its
// tokens, but its TTL restarts.
func TestEqualTokenBucketKeepsTokensAndRestartsTTL(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(true), Replacement: ReplaceFull}, srv) // a replacement would start full: 10
	f.Decide(bucketA)
	srv.next(t)
	slow := 1000 * time.Second // refill negligible
	srv.respond(t, assign(bucketA, tokenBucketStrategy(10, 1, slow), 3*time.Second))
	waitResponses(t, f, 1)
	if got := admits(f, bucketA, 6); got != 6 {
		t.Fatalf("admitted %d of 6", got)
	}
	clk.Advance(2 * time.Second)
	// Same but fill_interval.seconds differ: equal for Envoy.
	srv.respond(t, assign(bucketA, tokenBucketStrategy(10, 1, slow+7*time.Second), 3*time.Second))
	waitResponses(t, f, 2)
	if got := admits(f, bucketA, 10); got != 4 {
		t.Fatalf("admitted %d after an equal action, want the 4 left", got)
	}
	clk.Advance(2 * time.Second) // t0+4: past the first TTL (t0+3), inside the restarted one (t0+5)
	if f.Decide(bucketA) {
		t.Fatal("the restarted TTL should still hold the empty bucket")
	}
	clk.Advance(time.Second) // t0+5: expired into ALLOW_ALL (and a report tick)
	srv.next(t)
	if !f.Decide(bucketA) {
		t.Fatal("after the restarted TTL, no_assignment ALLOW_ALL applies")
	}
}

// A TokenBucket that differs replaces the live one: the newer Envoy starts it
// at the old remaining/max ratio × new max_tokens (truncated), the older one
// full; with no live token bucket (expired, never assigned) it starts full.
func TestTokenBucketReplacement(t *testing.T) {
	slow := 1000 * time.Second
	cases := []struct {
		name string
		mode Replacement
		want int
	}{
		{"ratio (newer Envoy)", ReplaceRatio, 7}, // 15 × 5/10 = 7.5 → 7
		{"full (older Envoy)", ReplaceFull, 15},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startTestServer(t, "")
			f, clk := newTestFilter(t, Config{NoAssignment: blanket(false), Replacement: tc.mode}, srv)
			f.Decide(bucketA)
			srv.next(t)
			srv.respond(t, assign(bucketA, tokenBucketStrategy(10, 1, slow), 2*time.Second))
			waitResponses(t, f, 1)
			admits(f, bucketA, 5)
			srv.respond(t, assign(bucketA, tokenBucketStrategy(15, 1, slow), 2*time.Second))
			waitResponses(t, f, 2)
			if got := admits(f, bucketA, 20); got != tc.want {
				t.Fatalf("replacement admitted %d, want %d", got, tc.want)
			}
			// Expired (no fallback): the next assignment starts full in both.
			clk.Advance(2 * time.Second)
			if f.Decide(bucketA) {
				t.Fatal("expired assignment should fall back to DENY_ALL")
			}
			srv.respond(t, assign(bucketA, tokenBucketStrategy(10, 1, slow), 2*time.Second))
			waitResponses(t, f, 3)
			if got := admits(f, bucketA, 20); got != 10 {
				t.Fatalf("after expiry admitted %d, want full 10", got)
			}
		})
	}
}

// RequestsPerTimeUnit is skipped: the bucket keeps its previous action, its
// tokens and its TTL.
func TestRequestsPerTimeUnitSkipped(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(false)}, srv)
	f.Decide(bucketA)
	srv.next(t)
	srv.respond(t, assign(bucketA, tokenBucketStrategy(3, 1, 1000*time.Second), 2*time.Second))
	waitResponses(t, f, 1)
	admits(f, bucketA, 2)
	clk.Advance(time.Second)
	srv.respond(t, assign(bucketA, rptu(), 60*time.Second))
	waitResponses(t, f, 2)
	if s := f.Stats(); s.IgnoredActions != 1 {
		t.Fatalf("ignored = %d, want 1", s.IgnoredActions)
	}
	if got := admits(f, bucketA, 5); got != 1 {
		t.Fatalf("admitted %d, want the 1 token left", got)
	}
	clk.Advance(time.Second) // t0+2: the original TTL, not restarted
	if f.Decide(bucketA) {
		t.Fatal("RequestsPerTimeUnit must not extend the TTL")
	}
}

// TTLs are whole seconds; on expiry the fallback applies for its timeout
// (whole seconds), then no_assignment_behavior.
func TestExpiryFallbackThenNoAssignment(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{
		NoAssignment: blanket(false), ExpiredFallback: blanket(true), ExpiredTimeout: 3900 * time.Millisecond,
	}, srv)
	f.Decide(bucketA)
	srv.next(t)
	srv.respond(t, assign(bucketA, tokenBucketStrategy(1, 1, 1000*time.Second), 2900*time.Millisecond))
	waitResponses(t, f, 1)
	if !f.Decide(bucketA) || f.Decide(bucketA) {
		t.Fatal("want one token")
	}
	clk.Advance(1999 * time.Millisecond)
	if f.Decide(bucketA) {
		t.Fatal("token bucket should still hold before 2 s")
	}
	clk.Advance(time.Millisecond) // t0+2: 2.9 s TTL is 2 s
	if got := admits(f, bucketA, 5); got != 5 {
		t.Fatalf("fallback ALLOW_ALL admitted %d of 5", got)
	}
	clk.Advance(2999 * time.Millisecond) // t0+4.999: fallback lasts 3 s
	if !f.Decide(bucketA) {
		t.Fatal("fallback should last 3 s")
	}
	clk.Advance(time.Millisecond) // t0+5 (a report tick too)
	srv.next(t)
	if f.Decide(bucketA) {
		t.Fatal("after the fallback, no_assignment DENY_ALL applies")
	}
}

// A TokenBucket fallback is built at the expiry instant like a replacement
// (ratio of the expiring bucket), and an assignment with a 0 s TTL expires at
// once.
func TestZeroTTLExpiresAtOnceIntoTokenBucketFallback(t *testing.T) {
	srv := startTestServer(t, "")
	f, _ := newTestFilter(t, Config{
		NoAssignment: blanket(false), ExpiredFallback: tokenBucketStrategy(4, 1, 1000*time.Second), ExpiredTimeout: 60 * time.Second,
	}, srv)
	f.Decide(bucketA)
	srv.next(t)
	srv.respond(t, assign(bucketA, blanket(true), 0))
	waitResponses(t, f, 1)
	if got := admits(f, bucketA, 10); got != 4 {
		t.Fatalf("admitted %d, want the fallback's 4 (a 0 s TTL expires at once; no live bucket, so full)", got)
	}
}

// Abandon erases the bucket and its unreported usage; the next request
// subscribes it again.
func TestAbandonErases(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(true)}, srv)
	f.Decide(bucketA)
	srv.next(t)
	admits(f, bucketA, 3)
	srv.respond(t, abandon(bucketA))
	waitResponses(t, f, 1)
	clk.Advance(time.Second)
	f.Decide(bucketA) // a new bucket again: immediate report, elapsed 0
	m := srv.next(t)
	checkUsage(t, usageOf(t, m, bucketA), 1, 0, 0)
	m = tick(t, clk, srv)
	checkUsage(t, usageOf(t, m, bucketA), 0, 0, 4) // the 3 before abandon are gone
}

// Actions for buckets the filter does not hold, or without an id, are ignored.
func TestUnknownBucketIgnored(t *testing.T) {
	srv := startTestServer(t, "")
	f, _ := newTestFilter(t, Config{NoAssignment: blanket(true)}, srv)
	f.Decide(bucketA)
	srv.next(t)
	resp := assign(bucketB, blanket(false), 60*time.Second)
	resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{})
	srv.respond(t, resp)
	waitResponses(t, f, 1)
	if s := f.Stats(); s.IgnoredActions != 2 {
		t.Fatalf("ignored = %d, want 2", s.IgnoredActions)
	}
	if !f.Decide(bucketA) {
		t.Fatal("bucket a changed")
	}
	f.Decide(bucketB) // b is new: subscribed now, decided unassigned (allow)
	checkUsage(t, usageOf(t, srv.next(t), bucketB), 1, 0, 0)
}

// A stream the server ends is not reopened at once: cached assignments hold,
// and the next report tick reopens it and sends that tick's reports.
func TestStreamFailureReopensOnNextTick(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(false)}, srv)
	f.Decide(bucketA)
	srv.next(t)
	srv.respond(t, assign(bucketA, tokenBucketStrategy(3, 1, 1000*time.Second), 60*time.Second))
	waitResponses(t, f, 1)
	srv.resetStream()
	if !testenv.Eventually(func() bool { return f.Endpoint() == -1 }) {
		t.Fatal("filter did not see the stream end")
	}
	if got := admits(f, bucketA, 5); got != 3 {
		t.Fatalf("cached assignment admitted %d, want 3", got)
	}
	f.Decide(bucketB) // a new bucket while down: its immediate report is dropped
	if s := f.Stats(); s.Dropped != 1 || srv.streams() != 1 {
		t.Fatalf("stats = %+v, streams = %d", s, srv.streams())
	}
	m := tick(t, clk, srv)
	if srv.streams() != 2 {
		t.Fatalf("streams = %d, want reopened", srv.streams())
	}
	checkUsage(t, usageOf(t, m, bucketA), 3, 2, 5)
	checkUsage(t, usageOf(t, m, bucketB), 0, 0, 5) // its first count went with the dropped report
}

// If the tick cannot reopen the stream, that tick's reports are dropped
// (their counts lost); a later tick reopens it.
func TestReopenFailureDropsTheTick(t *testing.T) {
	srv := startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(true), OpenTimeout: 2 * time.Second}, srv)
	f.Decide(bucketA)
	srv.next(t)
	admits(f, bucketA, 3)
	srv.grpc.Stop()
	if !testenv.Eventually(func() bool { return f.Endpoint() == -1 }) {
		t.Fatal("filter did not see the stream end")
	}
	clk.Advance(DefaultReportInterval)
	if !testenv.Eventually(func() bool { return f.Stats().Ticks == 1 }) {
		t.Fatal("tick did not run")
	}
	if s := f.Stats(); s.Dropped != 1 || s.Messages != 1 {
		t.Fatalf("stats = %+v, want the tick dropped", s)
	}
	srv2 := startTestServer(t, srv.addr) // back on the same address
	var m *rlqsv3.RateLimitQuotaUsageReports
	ok := testenv.Eventually(func() bool { // grpc-go's reconnect backoff is real time
		clk.Advance(DefaultReportInterval)
		select {
		case m = <-srv2.reports:
			return true
		default:
			return false
		}
	})
	if !ok {
		t.Fatal("stream never reopened")
	}
	if u := usageOf(t, m, bucketA); u.GetNumRequestsAllowed() != 0 {
		t.Fatalf("allowed = %d: the dropped tick's 3 should be lost", u.GetNumRequestsAllowed())
	}
}

// With several endpoints (an Envoy cluster), a reopen goes to a live one.
func TestReopenPicksLiveEndpoint(t *testing.T) {
	a, b := startTestServer(t, ""), startTestServer(t, "")
	f, clk := newTestFilter(t, Config{NoAssignment: blanket(true)}, a, b)
	f.Decide(bucketA)
	a.next(t)
	if f.Endpoint() != 0 {
		t.Fatalf("endpoint = %d, want 0", f.Endpoint())
	}
	a.grpc.Stop()
	if !testenv.Eventually(func() bool { return f.Endpoint() == -1 }) {
		t.Fatal("filter did not see the stream end")
	}
	m := tick(t, clk, b)
	if f.Endpoint() != 1 || len(m.GetBucketQuotaUsages()) != 1 {
		t.Fatalf("endpoint = %d, report %v", f.Endpoint(), m)
	}
}

// On the real clock every periodic report covers at least the interval, as
// Envoy's re-armed timer does (it never fires early, so time_elapsed is never
// truncated below the interval's whole seconds). A ticker fires on a fixed
// grid: a late tick followed by a punctual one reports 0.99 s as 0 s, and the
// server reads a demand rate inflated by the truncation.
func TestReportElapsedNeverUnderTheIntervalOnTheRealClock(t *testing.T) {
	srv := startTestServer(t, "")
	f, err := New(Config{Domain: "d", Servers: []string{srv.addr}, ReportInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Decide(bucketA)
	srv.next(t) // immediate
	for i := 0; i < 4; i++ {
		f.Decide(bucketA)
		u := usageOf(t, srv.next(t), bucketA)
		if got := u.GetTimeElapsed().AsDuration(); got < time.Second {
			t.Fatalf("report %d: time_elapsed %v < the 1 s interval", i+1, got)
		}
	}
}
