package rlqsserver_test

import (
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

const limit, window = 100, time.Minute

var tenantA = map[string]string{"tenant": "a"}

// stores are the real stores the server is tested over.
func stores(t *testing.T) map[string]func(t *testing.T) gale.Store {
	return map[string]func(t *testing.T) gale.Store{
		"memstore": func(*testing.T) gale.Store { return memstore.New() },
		"redis": func(t *testing.T) gale.Store {
			rs, err := redisstore.New(testenv.StartRedis(t).Client(), redisstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rs.Close() })
			return rs
		},
	}
}

// TestSubscriptionGetsAnAssignmentWithinTheWindow: the first report of a
// bucket gets one token bucket of at most L, whose TTL ends at least the
// Guard before its window does, and whose refill within the TTL is under a
// token.
func TestSubscriptionGetsAnAssignmentWithinTheWindow(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(t0.Add(10 * time.Second))
			sc := startSidecar(t, store(t), clk, rlqsserver.Options{})
			e := connect(t, sc)
			e.report(false, usage{bucket: tenantA, allowed: 1})
			a := e.next(tenantA)
			n, ttl := tokens(t, a)
			if n < 1 || n > limit {
				t.Errorf("max_tokens %d, want 1..%d", n, limit)
			}
			windowEnd := t0.Add(window)
			if end := clk.Now().Add(ttl); end.After(windowEnd.Add(-rlqs.DefaultGuard)) || ttl < time.Second || ttl%time.Second != 0 {
				t.Errorf("TTL %v from %v ends at %v: want whole seconds ending ≥ %v before %v", ttl, clk.Now(), end, rlqs.DefaultGuard, windowEnd)
			}
			fill := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetFillInterval().AsDuration()
			if fill <= ttl {
				t.Errorf("fill interval %v ≤ TTL %v: the bucket refills a token before it expires", fill, ttl)
			}
			t.Logf("%s: max_tokens %d, TTL %v (window ends in %v), fill interval %v", name, n, ttl, windowEnd.Sub(clk.Now()), fill)
			if st := ruleStats(sc.srv, "per-tenant"); st.Assignments != 1 || st.Units != n || st.Allowed != 1 {
				t.Errorf("stats %+v, want 1 assignment of %d units, 1 allowed", st, n)
			}
		})
	}
}

// twoStreams subscribes A at 10 s into the first window and B after it
// (no rate known: each predicted at L/8 = 12.5 per 60 s window over its
// TTL of ⌊50 − 0.25⌋ = 49 s, ⌈10.2⌉ = 11 units), reports A at 1 request/s
// and B at 0.5/s, and moves to the next window: they are split by demand.
func twoStreams(t *testing.T, sc *sidecar, clk *clock.Fake) (a, b *envoy, na, nb int64) {
	t.Helper()
	a, b = connect(t, sc), connect(t, sc)
	a.subscribe(tenantA)
	first, _ := tokens(t, a.nextGrant(tenantA))
	settled(t, sc) // what A's lease did not assign is back in the store
	b.subscribe(tenantA)
	joined, _ := tokens(t, b.nextGrant(tenantA))
	if first+joined > limit {
		t.Fatalf("first window: A %d, B %d: Σ > %d", first, joined, limit)
	}
	clk.Set(t0.Add(15 * time.Second))
	a.report(true, usage{bucket: tenantA, allowed: 5, elapsed: 5 * time.Second})
	// Neither denied a request: neither spent its share, so neither is
	// topped up.
	b.report(true, usage{bucket: tenantA, allowed: 3, elapsed: 6 * time.Second})
	clk.Set(t0.Add(window))
	na, ttlA := tokens(t, a.nextGrant(tenantA))
	nb, ttlB := tokens(t, b.nextGrant(tenantA))
	if ttlA != window-time.Second || ttlB != ttlA {
		t.Errorf("TTLs %v and %v, want %v (window less the guard, in whole seconds)", ttlA, ttlB, window-time.Second)
	}
	return a, b, na, nb
}

// TestTwoStreamsSplitByDemand: at a window's start the sidecar leases the
// streams' predicted demand over the assignment's TTL (59 s: 1/s × 59 = 59
// and ⌈0.5/s × 59⌉ = 30 units, not 60 and 30 over the window) and splits it
// by demand.
func TestTwoStreamsSplitByDemand(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(t0.Add(10 * time.Second))
			sc := startSidecar(t, store(t), clk, rlqsserver.Options{})
			_, _, na, nb := twoStreams(t, sc, clk)
			t.Logf("%s: A (1/s) %d, B (0.5/s) %d", name, na, nb)
			if na+nb > limit || na != 59 || nb != 30 {
				t.Errorf("A %d, B %d: want 59 and 30 (their demand over the 59 s TTL), Σ ≤ %d", na, nb, limit)
			}
		})
	}
}

// TestJoinerGetsOnlyTheUnassigned: an Envoy subscribing mid-window gets
// what A and B were not assigned (11 of 100), though its predicted demand
// (the mean rate over the 30 s left) is more.
func TestJoinerGetsOnlyTheUnassigned(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
	_, _, na, nb := twoStreams(t, sc, clk)
	clk.Set(t0.Add(window + 30*time.Second))
	c := connect(t, sc)
	c.report(false, usage{bucket: tenantA, allowed: 1})
	nc, ttl := tokens(t, c.nextGrant(tenantA))
	t.Logf("A %d, B %d, joiner %d (TTL %v)", na, nb, nc, ttl)
	if nc != limit-na-nb {
		t.Errorf("joiner got %d, want the %d unassigned", nc, limit-na-nb)
	}
	if ttl != 29*time.Second {
		t.Errorf("joiner's TTL %v, want 29s (30 s left less the guard)", ttl)
	}
}

// TestClosedStreamUnitsStayCharged: B's stream closes mid-window; its 30
// units are not given to a joiner in that window (B's Envoy enforces its
// cached assignment until the TTL), only the 11 never assigned; the next
// window splits L again among the streams connected.
func TestClosedStreamUnitsStayCharged(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
	a, b, na, nb := twoStreams(t, sc, clk)
	settled(t, sc)
	returned := ruleStats(sc.srv, "per-tenant").Returned
	b.close()
	clk.Set(t0.Add(window + 30*time.Second))
	c := connect(t, sc)
	c.report(false, usage{bucket: tenantA, allowed: 1})
	nc, _ := tokens(t, c.nextGrant(tenantA))
	if nc != limit-na-nb {
		t.Errorf("joiner got %d after B (%d) left, want only the %d never assigned", nc, nb, limit-na-nb)
	}
	settled(t, sc)
	if st := ruleStats(sc.srv, "per-tenant"); st.Returned != returned {
		t.Errorf("%d units returned to the store after B left: B's must stay charged", st.Returned-returned)
	}
	// Next window: A and the joiner only.
	a.report(true, usage{bucket: tenantA, allowed: 30, elapsed: 30 * time.Second})
	c.report(true, usage{bucket: tenantA, allowed: 10, elapsed: 30 * time.Second})
	clk.Set(t0.Add(2 * window))
	na2, _ := tokens(t, a.nextGrant(tenantA))
	nc2, _ := tokens(t, c.nextGrant(tenantA))
	t.Logf("window 2: A %d, B %d, joiner %d; window 3: A %d, joiner %d", na, nb, nc, na2, nc2)
	if na2+nc2 > limit || nc2 <= nc {
		t.Errorf("window 3: A %d, joiner %d: want Σ ≤ %d and the joiner's share grown from %d", na2, nc2, limit, nc)
	}
}

// TestTwoSidecarsOneRedis: Envoys on two sidecars over one Redis, with
// skewed demand, over several windows: what both sidecars assign in a
// window never exceeds L, since each leases from the same counter.
func TestTwoSidecarsOneRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	clk := clock.NewFake(t0.Add(5 * time.Second))
	var sidecars []*sidecar
	for range 2 {
		rs, err := redisstore.New(r.Client(), redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		sidecars = append(sidecars, startSidecar(t, rs, clk, rlqsserver.Options{}))
	}
	rates := []uint64{5, 1, 1, 1} // requests per second; the first Envoy is hot
	var envoys []*envoy
	for i := range 4 {
		e := connect(t, sidecars[i%2])
		e.report(true, usage{bucket: tenantA, allowed: 1})
		settled(t, sidecars[i%2])
		envoys = append(envoys, e)
	}
	for _, e := range envoys {
		e.report(true)
		e.pending(tenantA) // the first window's: not counted below
	}
	const windows = 4
	for w := 1; w <= windows; w++ {
		clk.Set(t0.Add(time.Duration(w)*window - 10*time.Second))
		for i, e := range envoys {
			e.report(true, usage{bucket: tenantA, allowed: rates[i] * 5, elapsed: 5 * time.Second})
		}
		before := []int64{ruleStats(sidecars[0].srv, "per-tenant").Leases, ruleStats(sidecars[1].srv, "per-tenant").Leases}
		clk.Set(t0.Add(time.Duration(w) * window))
		// A sidecar that announces before the other has waits for it,
		// up to the ledger's early part of the window.
		clk.Set(t0.Add(time.Duration(w)*window + gale.LedgerEarly(window) + time.Millisecond))
		// Each sidecar leases once at the window's start (its Envoys have
		// demand); the assignments are queued before the lease is counted.
		for i, s := range sidecars {
			waitFor(t, "the window's lease", func() bool { return ruleStats(s.srv, "per-tenant").Leases > before[i] })
			settled(t, s)
		}
		var sum int64
		got := make([]int64, len(envoys))
		for i, e := range envoys {
			e.report(true) // what was queued before this answer has arrived
			for _, a := range e.pending(tenantA) {
				n, _ := assigned(t, a) // DENY_ALL: no share this window
				got[i] += n
			}
			sum += got[i]
		}
		t.Logf("window %d: assigned %v, Σ %d of %d", w, got, sum, limit)
		if sum > limit {
			t.Fatalf("window %d: Σ assigned %d > L %d", w, sum, limit)
		}
		if sum == 0 {
			t.Fatalf("window %d: nothing assigned", w)
		}
	}
}

// TestBlanketActions: a bucket no limit matches is allowed, a limit of 0
// denies, a limit RLQS cannot serve (1 s window) is denied and named in
// the log; none is metered.
func TestBlanketActions(t *testing.T) {
	clk := clock.NewFake(t0)
	sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
	e := connect(t, sc)
	for _, tc := range []struct {
		bucket map[string]string
		want   typev3.RateLimitStrategy_BlanketRule
	}{
		{map[string]string{"nothing": "x"}, typev3.RateLimitStrategy_ALLOW_ALL},
		{map[string]string{"closed": "x"}, typev3.RateLimitStrategy_DENY_ALL},
		{map[string]string{"fast": "x"}, typev3.RateLimitStrategy_DENY_ALL},
	} {
		e.report(false, usage{bucket: tc.bucket, allowed: 1})
		qa := e.next(tc.bucket).GetQuotaAssignmentAction()
		if got := qa.GetRateLimitStrategy().GetBlanketRule(); got != tc.want || qa.GetRateLimitStrategy().GetTokenBucket() != nil {
			t.Errorf("%v: %v, want blanket %v", tc.bucket, qa.GetRateLimitStrategy(), tc.want)
		}
		if ttl := qa.GetAssignmentTimeToLive().AsDuration(); ttl != rlqsserver.DefaultBlanketTTL {
			t.Errorf("%v: TTL %v, want %v", tc.bucket, ttl, rlqsserver.DefaultBlanketTTL)
		}
	}
	s := sc.srv.Stats()
	if s.Blanket[rlqsserver.BlanketReason{Action: "deny_all", Reason: "refused"}] != 1 || s.Blanket[rlqsserver.BlanketReason{Action: "deny_all", Reason: "blocked"}] != 1 {
		t.Errorf("blanket counts %v", s.Blanket)
	}
}

// settled waits until s has no store call in flight.
func settled(t *testing.T, s *sidecar) {
	t.Helper()
	waitFor(t, "store calls to end", func() bool { return s.srv.Stats().StoreCalls == 0 })
}

// TestBadMessagesEndTheStreamClearly: a report without a domain, or with
// another domain than the stream's first, ends the stream with
// InvalidArgument; a bucket usage without an id is skipped and the rest
// served.
func TestBadMessagesEndTheStreamClearly(t *testing.T) {
	sc := startSidecar(t, memstore.New(), clock.NewFake(t0), rlqsserver.Options{})
	e := connect(t, sc)
	e.report(false, usage{bucket: nil, allowed: 1}, usage{bucket: map[string]string{"other": "x"}, allowed: 1})
	if e.next(map[string]string{"other": "x"}).GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
		t.Error("the good usage after a bad one was not served")
	}
	if got := sc.srv.Stats().Skipped["bucket_id"]; got != 1 {
		t.Errorf("skipped bucket_id %d, want 1", got)
	}
	e.domain = "another"
	if err := e.st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "another"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-e.ended:
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "one domain") {
			t.Errorf("stream ended with %v, want InvalidArgument naming the domain", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream not ended")
	}
	e2 := connect(t, sc)
	if err := e2.st.Send(&rlqspb.RateLimitQuotaUsageReports{}); err != nil {
		t.Fatal(err)
	}
	if err := <-e2.ended; status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "no domain") {
		t.Errorf("no domain: %v, want InvalidArgument", err)
	}
}

// TestIdleSubscriptionIsAbandoned: a subscription that reported no
// request for --rlqs-abandon-idle gets an AbandonAction and is left; a
// report with requests keeps it.
func TestIdleSubscriptionIsAbandoned(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{AbandonIdle: 2 * time.Minute})
	e := connect(t, sc)
	e.subscribe(tenantA)
	tokens(t, e.nextGrant(tenantA))
	clk.Set(t0.Add(100 * time.Second))
	e.report(true, usage{bucket: tenantA, allowed: 3, elapsed: 5 * time.Second}) // active at 100 s
	clk.Set(t0.Add(219 * time.Second))
	e.report(true, usage{bucket: tenantA, elapsed: 5 * time.Second}) // idle 119 s: kept
	for _, a := range e.pending(tenantA) {
		if a.GetAbandonAction() != nil {
			t.Fatal("abandoned before --rlqs-abandon-idle")
		}
	}
	clk.Set(t0.Add(220 * time.Second))
	e.report(false, usage{bucket: tenantA, elapsed: 5 * time.Second})
	for {
		a := e.next(tenantA)
		if a.GetAbandonAction() != nil {
			break
		}
		tokens(t, a) // the windows' assignments before it
	}
	// The sync bucket (no limit), idle since its subscription, is
	// abandoned too.
	if st := ruleStats(sc.srv, "per-tenant"); st.Abandons != 1 || sc.srv.Stats().Abandons != 2 {
		t.Errorf("abandons %d (all %d), want 1 (all 2)", st.Abandons, sc.srv.Stats().Abandons)
	}
}

// TestReloadTurnsAnAllowIntoAssignments: a bucket allowed for want of a
// limit gets a token bucket at its next report once a reload gives it a
// limit (the assignment replaces the blanket rule at the Envoy).
func TestReloadTurnsAnAllowIntoAssignments(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecarWith(t, "domain: q\ndescriptors:\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", memstore.New(), clk, rlqsserver.Options{})
	e := connect(t, sc)
	e.report(false, usage{bucket: tenantA, allowed: 1})
	if e.next(tenantA).GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
		t.Fatal("no limit: want ALLOW_ALL")
	}
	d, err := policy.Parse("q.yaml", []byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.eng.Load(bg, &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(15 * time.Second))
	e.report(false, usage{bucket: tenantA, allowed: 4, elapsed: 5 * time.Second})
	n, ttl := tokens(t, e.nextGrant(tenantA))
	if n < 1 || n > limit || clk.Now().Add(ttl).After(t0.Add(window-rlqs.DefaultGuard)) {
		t.Errorf("after the reload: %d tokens for %v, want ≤ %d ending before the window", n, ttl, limit)
	}
}

// TestExpiriesCounted: each assignment is counted expired once its TTL
// (and the guard) has passed, at the bucket's next event.
func TestExpiriesCounted(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
	a, b, _, _ := twoStreams(t, sc, clk) // window 1: 2 assignments; window 2: 2 more
	settled(t, sc)
	a.report(true, usage{bucket: tenantA, allowed: 5, elapsed: 5 * time.Second})
	b.report(true, usage{bucket: tenantA, allowed: 5, elapsed: 5 * time.Second})
	clk.Set(t0.Add(2 * window))
	tokens(t, a.nextGrant(tenantA))
	tokens(t, b.nextGrant(tenantA))
	settled(t, sc)
	if st := ruleStats(sc.srv, "per-tenant"); st.Expiries < 2 || st.Expiries > st.Assignments {
		t.Errorf("expiries %d of %d assignments, want the window before's (≥ 2)", st.Expiries, st.Assignments)
	}
}

// TestTwoLimitsBothBind: a bucket under a minute limit of 50 and an hour
// limit of 60, its demand (10/s) more than either: the first minute it is
// unknown (L/8 of the shorter window's 50, 6.25 per minute, over the 49 s
// TTL: 6) until its report shows it spent that, when it is topped up
// with what the minute has left (44: the hour has 54); the second minute
// only what the hour has left (60 − 50 = 10), and the third nothing:
// every unit is leased from both counters, and the surplus goes back.
func TestTwoLimitsBothBind(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
	two := map[string]string{"two": "x"}
	e := connect(t, sc)
	e.report(false, usage{bucket: two, allowed: 1})
	n1, ttl1 := tokens(t, e.nextGrant(two))
	if n1 < 1 || n1 > 50 || ttl1 != 49*time.Second {
		t.Fatalf("first minute: %d tokens for %v, want 1..50 for 49s", n1, ttl1)
	}
	// Each lease lands whole (its timer set, its surplus back) before
	// the clock moves on.
	settled(t, sc)
	clk.Set(t0.Add(30 * time.Second))
	e.report(true, usage{bucket: two, allowed: 6, denied: 194, elapsed: 20 * time.Second}) // 10/s: more than either limit
	up, _ := tokens(t, e.nextGrant(two))
	settled(t, sc)
	clk.Set(t0.Add(window))
	n2, _ := tokens(t, e.nextGrant(two))
	settled(t, sc)
	clk.Set(t0.Add(window + 30*time.Second))
	e.report(true, usage{bucket: two, allowed: 10, denied: 290, elapsed: 30 * time.Second})
	clk.Set(t0.Add(2 * window))
	settled(t, sc)
	n3 := int64(0)
	for _, a := range e.pending(two) {
		if tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			n3 += int64(tb.GetMaxTokens())
		}
	}
	t.Logf("minute 1: %d and a top-up of %d, minute 2: %d, minute 3: %d (hour: 60)", n1, up, n2, n3)
	if n1 != 6 || up != 44 {
		t.Errorf("minute 1: %d tokens and a top-up of %d, want 6 (unknown: ⌈50/8/60 s × 49 s⌉) and the 44 the minute has left", n1, up)
	}
	if n2 != 60-n1-up || n3 != 0 {
		t.Errorf("minutes 2 and 3: %d and %d tokens, want the %d the hour has left, then nothing", n2, n3, 60-n1-up)
	}
	if m, h := ruleStats(sc.srv, "two-minute"), ruleStats(sc.srv, "two-hour"); h.Leased-h.Returned != 60 || m.Leased-m.Returned != n1+up+n2+n3 {
		t.Errorf("minute leased %d returned %d, hour leased %d returned %d: want the hour's 60 and the minute's %d kept", m.Leased, m.Returned, h.Leased, h.Returned, n1+n2+n3)
	}
}

// TestTwoLimitsWindowsNotNested: under a 7 s and a 10 s limit whose
// windows do not nest, an assignment expires before the first of the two
// windows ends, not the machine's (the 7 s one): its units were leased
// from both.
func TestTwoLimitsWindowsNotNested(t *testing.T) {
	// An instant 1 s into a 7 s window and 6 s into a 10 s one: the 10 s
	// window ends in 4 s, the 7 s one in 6 s.
	u := t0.Unix()
	for u%7 != 1 || u%10 != 6 {
		u++
	}
	now := time.Unix(u, 0)
	clk := clock.NewFake(now)
	sc := startSidecarWith(t, "domain: q\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: seven, unit: second, unit_multiplier: 7, requests_per_unit: 100}\n      - {name: ten, unit: second, unit_multiplier: 10, requests_per_unit: 100}\n",
		memstore.New(), clk, rlqsserver.Options{})
	k := map[string]string{"k": "v"}
	e := connect(t, sc)
	e.report(false, usage{bucket: k, allowed: 1})
	n, ttl := tokens(t, e.nextGrant(k))
	t.Logf("%d tokens for %v (the 10 s window ends in 4 s, the 7 s one in 6 s)", n, ttl)
	if ttl != 3*time.Second {
		t.Errorf("TTL %v, want 3s: ⌊4 s − guard⌋, before the 10 s window ends", ttl)
	}
}

// TestReloadChangingALimitIsNoticedAtTheNextReport: a bucket keeps what
// it resolved to until the policy's generation moves, so a reload that
// changes its limit must still reach it at its next report: a limit cut
// from 100 to 10 per minute bounds the next window's assignment to 10 (the
// demand, 20/s, would take all 100), and one cut to 0 answers DENY_ALL at
// the report itself.
func TestReloadChangingALimitIsNoticedAtTheNextReport(t *testing.T) {
	for _, tc := range []struct {
		name, to string
		check    func(t *testing.T, e *envoy, clk *clock.Fake)
	}{
		{"cut to 10", "requests_per_unit: 10}", func(t *testing.T, e *envoy, clk *clock.Fake) {
			clk.Set(t0.Add(window))
			n, _ := tokens(t, e.nextGrant(tenantA))
			t.Logf("the next window assigns %d tokens", n)
			if n < 1 || n > 10 {
				t.Errorf("the next window assigns %d tokens, want 1..10: the reload's limit", n)
			}
		}},
		{"cut to 0", "requests_per_unit: 0}", func(t *testing.T, e *envoy, _ *clock.Fake) {
			qa := e.next(tenantA).GetQuotaAssignmentAction()
			if got := qa.GetRateLimitStrategy().GetBlanketRule(); got != typev3.RateLimitStrategy_DENY_ALL || qa.GetRateLimitStrategy().GetTokenBucket() != nil {
				t.Errorf("after the reload to 0: %v, want a blanket DENY_ALL", qa.GetRateLimitStrategy())
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0.Add(10 * time.Second))
			sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
			e := connect(t, sc)
			e.report(false, usage{bucket: tenantA, allowed: 1})
			if n, _ := tokens(t, e.nextGrant(tenantA)); n < 1 || n > limit {
				t.Fatalf("before the reload: %d tokens, want 1..%d", n, limit)
			}
			settled(t, sc) // the lease's landing has set the window's timer
			d, err := policy.Parse("q.yaml", []byte(strings.Replace(testPolicy, "requests_per_unit: 100}", tc.to, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.eng.Load(bg, &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
				t.Fatal(err)
			}
			clk.Set(t0.Add(15 * time.Second))
			e.report(true, usage{bucket: tenantA, allowed: 100, elapsed: 5 * time.Second})
			tc.check(t, e, clk)
		})
	}
}

// TestReloadReachesTheNextWindowWithoutAReport: a reload between a
// bucket's last report and its window's end bounds the lease the next
// window starts with, which comes from the bucket's timer, not from a
// report. With the last report at 55 s and the limit per minute cut from
// 100 to 10 at 57 s, the window at 60 s was assigned 100 tokens (the rule
// the bucket had captured), where RLS on the same counter admits 10; a cut
// to 0 was ignored alike, and a reload that moved the counter (another
// window) went on leasing the old limit from a counter nothing else reads.
// Two Envoys subscribe, so the next window's lease must count both.
func TestReloadReachesTheNextWindowWithoutAReport(t *testing.T) {
	for _, tc := range []struct {
		name, to string
		check    func(t *testing.T, e *envoy) int64
	}{
		{"cut to 10", "{name: per-tenant, unit: minute, requests_per_unit: 10}", func(t *testing.T, e *envoy) int64 {
			n, _ := tokens(t, e.nextGrant(tenantA))
			t.Logf("the next window assigns %d tokens", n)
			if n < 1 || n > 10 {
				t.Errorf("the next window assigns %d tokens, want 1..10: the reload's limit", n)
			}
			return n
		}},
		{"cut to 0", "{name: per-tenant, unit: minute, requests_per_unit: 0}", func(t *testing.T, e *envoy) int64 {
			qa := e.next(tenantA).GetQuotaAssignmentAction()
			if got := qa.GetRateLimitStrategy().GetBlanketRule(); got != typev3.RateLimitStrategy_DENY_ALL || qa.GetRateLimitStrategy().GetTokenBucket() != nil {
				t.Errorf("at the window after the reload to 0: %v, want a blanket DENY_ALL", qa.GetRateLimitStrategy())
			}
			return 0
		}},
		{"the counter moves", "{name: per-tenant, unit: second, unit_multiplier: 30, requests_per_unit: 10}", func(t *testing.T, e *envoy) int64 {
			n, ttl := tokens(t, e.nextGrant(tenantA))
			t.Logf("the next window assigns %d tokens for %v", n, ttl)
			if n < 1 || n > 10 || ttl > 30*time.Second {
				t.Errorf("the next window assigns %d tokens for %v, want 1..10 for at most the new 30 s window", n, ttl)
			}
			return n
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(t0.Add(10 * time.Second))
			sc := startSidecar(t, memstore.New(), clk, rlqsserver.Options{})
			a, b := connect(t, sc), connect(t, sc)
			a.report(false, usage{bucket: tenantA, allowed: 1})
			tokens(t, a.nextGrant(tenantA))
			b.report(false, usage{bucket: tenantA, allowed: 1})
			tokens(t, b.nextGrant(tenantA))
			settled(t, sc)
			clk.Set(t0.Add(55 * time.Second))
			a.report(true, usage{bucket: tenantA, allowed: 900, elapsed: 45 * time.Second}) // 20/s: the demand would take all 100
			b.report(true, usage{bucket: tenantA, allowed: 900, elapsed: 45 * time.Second})
			settled(t, sc)
			clk.Set(t0.Add(57 * time.Second))
			d, err := policy.Parse("q.yaml", []byte(strings.Replace(testPolicy, "{name: per-tenant, unit: minute, requests_per_unit: 100}", tc.to, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.eng.Load(bg, &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
				t.Fatal(err)
			}
			a.pending(tenantA)
			b.pending(tenantA)
			clk.Set(t0.Add(window)) // no report: the timer starts the window
			if sum := tc.check(t, a) + tc.check(t, b); sum > 10 {
				t.Errorf("the two Envoys are assigned %d tokens in the next window, want at most the reload's 10", sum)
			}
		})
	}
}
