package rlqsserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

// TestEveryActionOfABurstArrives (issue 41, items 3 and 8), on a real
// Redis: an Envoy with n buckets (the shipped config makes one per path)
// reports them all in one message, as Envoy does at every tick, and reads
// nothing until the sidecar has leased for every one. Each bucket's
// assignment must arrive. With one action per message through a queue of
// 256, most were dropped while the Envoy was not reading (charged and
// never delivered); with more than 4,096 buckets the whole report was
// refused with INVALID_ARGUMENT.
func TestEveryActionOfABurstArrives(t *testing.T) {
	for _, n := range []int{3000, 5000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			clk := clock.NewFake(t0.Add(10 * time.Second))
			sc := startSidecar(t, stores(t)["redis"](t), clk, rlqsserver.Options{})
			conn := dial(t, sc)
			// The stream's deadline bounds the wait for assignments that
			// never come.
			ctx, cancel := context.WithTimeout(bg, testenv.StoreDeadline)
			defer cancel()
			st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Long ids, as a bucket per path has: the actions fill the
			// stream's flow-control window (HTTP/2's grows to a few MB)
			// long before they are all sent.
			pad := "/" + strings.Repeat("v1/items/", 50)
			m := &rlqspb.RateLimitQuotaUsageReports{Domain: "q"}
			for i := range n {
				m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
					BucketId: &rlqspb.BucketId{Bucket: map[string]string{"tenant": strconv.Itoa(i) + pad}}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1})
			}
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
			// Not reading: the assignments pile up behind the stream's
			// flow control while the leases land.
			waitFor(t, "a lease for every bucket", func() bool { return ruleStats(sc.srv, "per-tenant").Leases >= int64(n) })
			got := map[string]bool{}
			for len(got) < n {
				r, err := st.Recv()
				if err != nil {
					t.Fatalf("after %d of %d buckets' assignments: %v", len(got), n, err)
				}
				for _, a := range r.GetBucketAction() {
					if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
						t.Fatalf("bucket %v: %v, want a token bucket", a.GetBucketId().GetBucket(), a)
					}
					got[a.GetBucketId().GetBucket()["tenant"]] = true
				}
			}
			s := sc.srv.Stats()
			if len(got) != n {
				t.Fatalf("%d of %d buckets got their assignment (superseded %d)", len(got), n, s.Superseded)
			}
			t.Logf("%d assignments in %d messages", s.Actions, s.Messages)
			if s.Messages >= s.Actions {
				t.Errorf("%d messages for %d actions: not batched", s.Messages, s.Actions)
			}
		})
	}
}

// countingHandler counts the records logged, by message, and keeps the
// last of each.
type countingHandler struct {
	mu   sync.Mutex
	n    map[string]int
	last map[string]slog.Record
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	h.last[r.Message] = r
	return nil
}

func (h *countingHandler) count(msg string) (int, slog.Record) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg], h.last[msg]
}

// TestStoreFailuresAreLoggedPerCause (issue 41, item 7): Redis is gone and
// an Envoy's 2,000 buckets each fail their lease. Each failure was a WARN
// line (one client's 10,000 buckets wrote 219,475 in 50 s); a cause is
// logged once per WarnEvery, and the next line says how many were not.
func TestStoreFailuresAreLoggedPerCause(t *testing.T) {
	const n = 2000
	srv := testenv.StartRedis(t)
	rs, err := redisstore.New(srv.Client(), redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	h := &countingHandler{n: map[string]int{}, last: map[string]slog.Record{}}
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, rs, clk, rlqsserver.Options{Logger: slog.New(h)})
	srv.Kill()
	e := connect(t, sc)
	var us []usage
	for i := range n {
		us = append(us, usage{bucket: map[string]string{"tenant": strconv.Itoa(i)}, allowed: 1})
	}
	const failed = "rlqs: lease failed; the next window or report asks again"
	e.report(true, us...)
	waitFor(t, "the leases to fail", func() bool {
		return sc.srv.Stats().StoreCalls == 0 && func() bool { c, _ := h.count(failed); return c > 0 }()
	})
	if c, _ := h.count(failed); c != 1 {
		t.Fatalf("%d buckets' failed leases logged %d lines, want 1", n, c)
	}
	// A window later every bucket asks again (the window timer, or this
	// report): the cause is logged once more, saying how many were not.
	clk.Advance(rlqsserver.WarnEvery)
	e.report(true, us...)
	waitFor(t, "the second line", func() bool { c, _ := h.count(failed); return c >= 2 && sc.srv.Stats().StoreCalls == 0 })
	c, last := h.count(failed)
	var quiet int64
	last.Attrs(func(a slog.Attr) bool {
		if a.Key == "not_logged_since_last" {
			quiet = a.Value.Int64()
		}
		return true
	})
	if c != 2 || quiet < n-1 {
		t.Fatalf("after %v: %d lines, the last saying %d not logged; want 2, and at least %d", rlqsserver.WarnEvery, c, quiet, n-1)
	}
	t.Logf("%d lines for %d+ failed leases; the second says %d were not logged", c, 2*n, quiet)
}

// TestAGreedyReporterGetsOnlyWhatHonestOnesLeave (issue 41, item 4), on a
// real Redis: three honest Envoys report 0.2 requests a second each, one
// reports the most a report may carry (2⁴⁰ − 1 denied in 5 s). The next
// window's 100 are split max-min fairly: the honest ones get their demand
// over the 59 s TTL (12 each), the greedy one what is left. In proportion
// to demand the greedy one took all 100 and the honest ones 0.
func TestAGreedyReporterGetsOnlyWhatHonestOnesLeave(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, stores(t)["redis"](t), clk, rlqsserver.Options{})
	var es []*envoy
	for range 4 {
		e := connect(t, sc)
		e.subscribe(tenantA)
		e.next(tenantA)
		es = append(es, e)
	}
	clk.Set(t0.Add(15 * time.Second))
	es[0].report(true, usage{bucket: tenantA, denied: 1<<40 - 1, elapsed: 5 * time.Second})
	for _, e := range es[1:] {
		e.report(true, usage{bucket: tenantA, allowed: 1, elapsed: 5 * time.Second})
	}
	// The greedy one's report says it spent its 11: it is topped up with
	// the 56 the four subscriptions left in this window.
	if n, _ := tokens(t, es[0].nextGrant(tenantA)); n != limit-4*11 {
		t.Errorf("greedy top-up %d, want the %d left", n, limit-4*11)
	}
	clk.Set(t0.Add(window))
	greedy, _ := tokens(t, es[0].nextGrant(tenantA))
	sum := greedy
	for i, e := range es[1:] {
		n, _ := tokens(t, e.nextGrant(tenantA))
		sum += n
		if n < 12 {
			t.Errorf("honest Envoy %d got %d, want its demand of 12 (0.2/s over the 59 s TTL): the greedy one got %d", i+1, n, greedy)
		}
	}
	if sum > limit || greedy != limit-3*12 {
		t.Errorf("greedy %d, Σ %d: want the %d the honest ones leave, Σ ≤ %d", greedy, sum, limit-3*12, limit)
	}
}

// gatedStore holds its first lease until release is closed: Envoys that
// subscribe while it is in flight subscribe together.
type gatedStore struct {
	gale.Store
	once    sync.Once
	release chan struct{}
}

func (s *gatedStore) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	s.once.Do(func() { <-s.release })
	return s.Store.Lease(ctx, key, rule, lo, hi, now)
}

// TestEnvoysSubscribingTogetherEachGetTheirShare (issue 41, item 1), on a
// real Redis: four Envoys subscribe while the first one's lease is in
// flight. Each is predicted at L/8 a window over its 49 s TTL (11 of 100);
// the lease asked for the first is the first's, and the three others ask
// theirs next. Split among all four, the first's 11 gave them 3, 3, 3 and
// 2, and none was topped up in the window.
func TestEnvoysSubscribingTogetherEachGetTheirShare(t *testing.T) {
	store := &gatedStore{Store: stores(t)["redis"](t), release: make(chan struct{})}
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, store, clk, rlqsserver.Options{})
	var es []*envoy
	for range 4 {
		e := connect(t, sc)
		e.subscribe(tenantA)
		es = append(es, e)
	}
	close(store.release)
	var sum int64
	for i, e := range es {
		n, ttl := tokens(t, e.nextGrant(tenantA))
		sum += n
		if n != 11 || ttl != 49*time.Second {
			t.Errorf("Envoy %d: %d tokens for %v, want 11 (L/8 a window over the 49 s TTL)", i, n, ttl)
		}
	}
	if sum > limit {
		t.Fatalf("Σ %d > L %d", sum, limit)
	}
}

// TestAnEnvoyThatSpentItsShareIsToppedUp (issue 41, item 1), on a real
// Redis: an Envoy alone on a bucket subscribes at a window's start and is
// predicted at L/8 (13 of 100 over its 59 s TTL). Its first periodic
// report shows requests denied over the 5 s since: it has spent its share,
// and the window has 87 left, so it is topped up with them, a fresh token
// bucket behind a DENY_ALL in one message (the Envoy drops the spent
// bucket and builds the new one full). A report without denials, one in a
// spent window, or one whose interval began before the assignment (the
// next window's first report, which holds the denials of the window
// before) tops up nothing. Before, an Envoy holding an assignment was
// never topped up: it got 13 of a window its demand of 42 a second could
// have filled.
func TestAnEnvoyThatSpentItsShareIsToppedUp(t *testing.T) {
	clk := clock.NewFake(t0)
	sc := startSidecar(t, stores(t)["redis"](t), clk, rlqsserver.Options{})
	e := connect(t, sc)
	e.subscribe(tenantA)
	first, ttl := tokens(t, e.nextGrant(tenantA))
	if first != 13 || ttl != 59*time.Second {
		t.Fatalf("subscription: %d tokens for %v, want 13 for 59 s", first, ttl)
	}
	// quiet: no token bucket sent (a seal, a DENY_ALL two Guards before
	// an assignment expires, may be).
	quiet := func(when string) {
		t.Helper()
		settled(t, sc)
		for _, a := range e.pending(tenantA) {
			if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() != nil {
				t.Fatalf("%s: %v, want no token bucket", when, a)
			}
		}
	}
	clk.Set(t0.Add(5 * time.Second))
	e.report(true, usage{bucket: tenantA, allowed: 13, denied: 0, elapsed: 5 * time.Second})
	quiet("a report without denials")
	clk.Set(t0.Add(10 * time.Second))
	e.report(true, usage{bucket: tenantA, allowed: 0, denied: 230, elapsed: 5 * time.Second})
	deny := e.next(tenantA)
	if deny.GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
		t.Fatalf("top-up: first %v, want a DENY_ALL ahead of the token bucket", deny)
	}
	up := e.next(tenantA)
	n, ttl := tokens(t, up)
	if n != limit-first || ttl != 49*time.Second {
		t.Errorf("top-up: %d tokens for %v, want the window's %d left for the 49 s left", n, ttl, limit-first)
	}
	if !e.together(deny, up) {
		t.Error("the top-up and its DENY_ALL came in two messages: between them the Envoy denies, and apart a newer Envoy keeps the spent bucket's ratio")
	}
	if st := sc.srv.Stats().Rules[0]; st.TopUps != 1 || st.Units != limit {
		t.Errorf("stats: %d top-ups, %d units assigned; want 1 and %d", st.TopUps, st.Units, limit)
	}
	clk.Set(t0.Add(55 * time.Second))
	e.report(true, usage{bucket: tenantA, allowed: 87, denied: 120, elapsed: 45 * time.Second})
	quiet("spent again with the window spent")
	// Idle reports halve its smoothed rate each (14.4/s to 0.9/s).
	for at := 56 * time.Second; at < window; at += time.Second {
		clk.Set(t0.Add(at))
		e.report(true, usage{bucket: tenantA, elapsed: time.Second})
	}
	quiet("idle reports")
	// The next window: its assignment (0.9/s over 59 s: 54 of 100), then
	// a report whose interval began at 59 s, before it: its denials are
	// the window before's, and the 46 left stay in the store.
	clk.Set(t0.Add(window))
	if n, _ := tokens(t, e.nextGrant(tenantA)); n != 54 {
		t.Fatalf("second window: %d tokens, want 54", n)
	}
	clk.Set(t0.Add(window + 2*time.Second))
	e.report(true, usage{bucket: tenantA, allowed: 20, denied: 30, elapsed: 3 * time.Second})
	quiet("a report whose interval began before the assignment")
}

// TestStreamsAndBucketsAreBounded (issue 41, item 4): one client
// connection holds at most MaxStreamsPerConn streams (500 streams on one
// connection were 500 Envoys to the split); another connection holds its
// own; a stream closed frees its place. Past MaxBuckets a new bucket's
// usage is skipped (reason buckets) and the others served.
func TestStreamsAndBucketsAreBounded(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, stores(t)["redis"](t), clk, rlqsserver.Options{MaxStreamsPerConn: 3, MaxBuckets: 5})
	// open opens a stream on conn and reports one bucket on it: its answer
	// is the bucket's action, or the stream's refusal.
	open := func(conn *grpc.ClientConn, tenant string) (grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], error) {
		ctx, cancel := context.WithTimeout(bg, testenv.StoreDeadline)
		t.Cleanup(cancel)
		st, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "q", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"tenant": tenant}}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1}}}); err != nil {
			return nil, err
		}
		_, err = st.Recv()
		return st, err
	}
	one := dial(t, sc)
	var held []grpc.BidiStreamingClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	for i := range 3 {
		st, err := open(one, "a")
		if err != nil {
			t.Fatalf("stream %d of 3 on one connection: %v", i, err)
		}
		held = append(held, st)
	}
	if _, err := open(one, "a"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream on one connection: %v, want ResourceExhausted", err)
	}
	if _, err := open(dial(t, sc), "a"); err != nil {
		t.Fatalf("a stream on another connection: %v", err)
	}
	if err := held[0].CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the closed stream to free its place", func() bool {
		st, err := open(one, "a")
		if err == nil {
			held = append(held, st)
		}
		return err == nil
	})
	if got := sc.srv.Stats().RefusedStreams; got < 1 {
		t.Errorf("refused streams counted %d, want at least 1", got)
	}
	// Buckets: a (above), then b..h on a new connection: 5 tracked at most.
	for _, tenant := range []string{"b", "c", "d", "e"} {
		if _, err := open(dial(t, sc), tenant); err != nil {
			t.Fatalf("bucket %s: %v", tenant, err)
		}
	}
	e := connect(t, sc)
	e.report(false, usage{bucket: map[string]string{"tenant": "f"}, allowed: 1}, usage{bucket: map[string]string{"tenant": "a"}, allowed: 1}, usage{bucket: map[string]string{"tenant": "g"}, allowed: 1})
	e.next(map[string]string{"tenant": "a"}) // a tracked bucket is served
	waitFor(t, "f and g skipped, past the 5 tracked", func() bool { return sc.srv.Stats().Skipped["buckets"] == 2 })
}

// TestManyStreamsOfOneClientAreOneShare (issue 41, item 4), on a real
// Redis: one client holds 16 streams on one connection (the most it may),
// each reporting 2⁴⁰ − 1 denied; three honest Envoys report 0.2 requests
// a second. The window's 100 are split among connections first: the
// honest ones get their demand (12), the greedy client the rest across its
// streams. Split among streams, the 16 were 16 Envoys (the honest ones got
// 5 each, a third of what they asked).
func TestManyStreamsOfOneClientAreOneShare(t *testing.T) {
	clk := clock.NewFake(t0.Add(10 * time.Second))
	sc := startSidecar(t, stores(t)["redis"](t), clk, rlqsserver.Options{})
	conn := dial(t, sc)
	var greedy []*envoy
	for range 16 {
		greedy = append(greedy, connectOn(t, conn))
	}
	var honest []*envoy
	for range 3 {
		honest = append(honest, connect(t, sc))
	}
	for _, e := range append(slices.Clone(greedy), honest...) {
		e.subscribe(tenantA)
		e.next(tenantA)
	}
	clk.Set(t0.Add(15 * time.Second))
	for _, e := range greedy {
		e.report(true, usage{bucket: tenantA, denied: 1<<40 - 1, elapsed: 5 * time.Second})
	}
	for _, e := range honest {
		e.report(true, usage{bucket: tenantA, allowed: 1, elapsed: 5 * time.Second})
	}
	clk.Set(t0.Add(window))
	var sum int64
	for i, e := range honest {
		n, _ := assigned(t, e.next(tenantA))
		sum += n
		if n < 12 {
			t.Errorf("honest Envoy %d got %d, want its demand of 12 beside one greedy client of 16 streams", i, n)
		}
	}
	for _, e := range greedy {
		n, _ := assigned(t, e.next(tenantA))
		sum += n
	}
	if sum > limit {
		t.Fatalf("Σ %d > L %d", sum, limit)
	}
}

// orderedStore is a sidecar's store in TestSidecarsShareAWindowByDemand:
// after, when set, holds each lease until the other sidecar's store has
// leased in the same window (the order that starved a sidecar first come);
// the ledger's announcements pass through at once.
type orderedStore struct {
	gale.Store
	mu     sync.Mutex
	leased map[int64]chan struct{} // by window of the test's limit
	after  *orderedStore
}

func (s *orderedStore) windowDone(w int64) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leased[w] == nil {
		s.leased[w] = make(chan struct{})
	}
	return s.leased[w]
}

func (s *orderedStore) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	w := now.UnixMicro() / window.Microseconds()
	if s.after != nil {
		select {
		case <-s.after.windowDone(w):
		case <-ctx.Done():
			return gale.Grant{}, ctx.Err()
		}
	}
	g, err := s.Store.Lease(ctx, key, rule, lo, hi, now)
	if done := s.windowDone(w); s.after == nil {
		select {
		case <-done:
		default:
			close(done)
		}
	}
	return g, err
}

func (s *orderedStore) Announce(ctx context.Context, key string, rule gale.Rule, member string, demand int64, now time.Time) ([]gale.Demand, error) {
	return s.Store.(gale.DemandLedger).Announce(ctx, key, rule, member, demand, now)
}

// TestSidecarsShareAWindowByDemand (issue 41, item 9), on a real Redis:
// sidecar A's Envoy reports a demand far over L, sidecar B's 0.5 a second
// (30 over the 59 s TTL), and A's leases always reach the store first.
// Through the demand ledger, where both announce at each window's start
// (the first to announce waits for a sidecar that leased in the window
// before, up to the ledger's early part of the window), A leaves B its
// max-min share from window 2 on: B is assigned its 30 every window.
// (Window 1 is the first either announces in, the subscriptions' leases
// being first come: who announces first there may take all of L.) First
// come, A leased all of L every window and B got nothing.
func TestSidecarsShareAWindowByDemand(t *testing.T) {
	r := testenv.StartRedis(t)
	clk := clock.NewFake(t0.Add(10 * time.Second))
	var stores [2]*orderedStore
	var sidecars [2]*sidecar
	for i := range 2 {
		rs, err := redisstore.New(r.Client(), redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		stores[i] = &orderedStore{Store: rs, leased: map[int64]chan struct{}{}}
	}
	stores[1].after = stores[0]
	for i := range 2 {
		sidecars[i] = startSidecar(t, stores[i], clk, rlqsserver.Options{Member: fmt.Sprintf("sidecar-%c", 'A'+i)})
	}
	a, b := connect(t, sidecars[0]), connect(t, sidecars[1])
	a.subscribe(tenantA)
	settled(t, sidecars[0])
	b.subscribe(tenantA)
	settled(t, sidecars[1])
	a.pending(tenantA)
	b.pending(tenantA)
	for w := 1; w <= 4; w++ {
		clk.Set(t0.Add(time.Duration(w)*window - 10*time.Second))
		a.report(true, usage{bucket: tenantA, denied: 1 << 30, elapsed: 5 * time.Second})
		b.report(true, usage{bucket: tenantA, allowed: 2, denied: 1, elapsed: 6 * time.Second})
		// Each Envoy has spent its share of the window before: each is
		// topped up from what it has left (or refused) before it ends.
		// A sync report behind each top-up reaches its Envoy after it,
		// and the top-ups are put aside.
		settled(t, sidecars[0])
		settled(t, sidecars[1])
		a.report(true)
		b.report(true)
		a.pending(tenantA)
		b.pending(tenantA)
		clk.Set(t0.Add(time.Duration(w) * window))
		// Both announce at the window's start; the one that announces
		// first waits for the other, up to the ledger's early part of
		// the window, and then leases.
		waitFor(t, "both sidecars' announcements", func() bool {
			for _, k := range r.Client().Keys(bg, "*:ledger").Val() {
				h := r.Client().HGetAll(bg, k).Val()
				if h["."] == strconv.FormatInt(t0.Add(time.Duration(w)*window).UnixMicro()/window.Microseconds(), 10) && h["c:sidecar-A"] != "" && h["c:sidecar-B"] != "" {
					return true
				}
			}
			return false
		})
		clk.Set(t0.Add(time.Duration(w)*window + gale.LedgerEarly(window) + time.Millisecond))
		na, _ := tokens(t, a.nextGrant(tenantA))
		settled(t, sidecars[0])
		settled(t, sidecars[1])
		if w == 1 {
			b.pending(tenantA) // a share, or a deny: first come
			continue
		}
		nb, _ := tokens(t, b.nextGrant(tenantA))
		t.Logf("window %d: A %d, B %d", w, na, nb)
		if na+nb > limit {
			t.Fatalf("window %d: Σ %d > L %d", w, na+nb, limit)
		}
		if nb != 30 || na != limit-30 {
			t.Errorf("window %d: A %d, B %d: want B its demand (30: 0.5/s over the 59 s TTL) and A the rest (%d)", w, na, nb, limit-30)
		}
	}
}
