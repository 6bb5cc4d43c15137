package federation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// l3Latency is what the proxy in front of a coordinator does to its
// replies.
type l3Latency uint8

const (
	latencyNone  l3Latency = iota
	latencyBelow           // slowL3.delay: well below the regions' timeout
	latencyAbove           // ten times the timeout: no answer comes in time
)

// slowL3 is a coordinator (L3) the regions reach through a toxiproxy proxy
// that delays its replies, and the same coordinator reached around the
// proxy, for the test to read what it counted.
type slowL3 struct {
	proxy *testenv.Proxy
	// via and patient reach the L3 through the proxy: via bounds each
	// call by timeout, patient by patientTimeout.
	via, patient federation.Coordinator
	direct       federation.Coordinator // around the proxy: the test's
	timeout      time.Duration          // bounds each call of a region to the L3
	delay        time.Duration          // latencyBelow's latency
	// lateCounted: a lease whose answer comes too late was granted, and is
	// counted, on the L3. Redis grants in the one round trip whose reply
	// is delayed; Postgres commits in a second round trip, which a lease
	// that timed out on its first never sends.
	lateCounted bool
	// addr is the Redis L3's own address, for watchLeases; "" for
	// Postgres.
	addr string
	now  l3Latency
}

// slowTimeout bounds the regions' calls to a slow L3 (their processes'
// StoreTimeout, the client's read timeout): small, so that a call far above
// it fails fast and the test stays quick, yet well above the latency below
// it (5 ms; Postgres 2 ms) and a burst's leases queued behind one another
// (on Postgres they queue on the budget row's lock, 24 at K = 8).
//
// On a machine starved of CPU (under -race, beside another package's
// tests, on two cores) a lease can still take longer than slowTimeout
// with no latency at all: the L3 grants it, the answer comes too late, and
// its units are lost to the window — correctly, but an exact count then
// fails. So the exact counts (the tightness case) run on a fleet whose
// processes wait up to patientTimeout (a lease that is not timed:
// testenv.StoreDeadline), and the windows on slowTimeout assert bounds,
// which no lost answer can break.
const (
	slowTimeout    = 150 * time.Millisecond
	patientTimeout = testenv.StoreDeadline
)

// set puts latency lat on the L3's replies from now on. The latency is on
// the replies only (downstream): a request reaches the L3 at once, and what
// it grants is counted there whether or not the answer arrives in time.
// Added to a healthy path it delays the connections already open; changing
// or removing one drops them (toxiproxy removes a toxic with its
// connections), and calls in flight on them fail.
func (s *slowL3) set(lat l3Latency) {
	if lat == s.now {
		return
	}
	if s.now != latencyNone {
		s.proxy.Heal()
	}
	s.now = lat
	switch lat {
	case latencyBelow:
		s.proxy.Latency("downstream", s.delay)
	case latencyAbove:
		s.proxy.Latency("downstream", 10*s.timeout)
	}
}

// waitHealthy waits for the L3 to answer through the proxy once healed.
// Postgres's pool hands out the connections the healing dropped first, and
// each fails once: asking until an answer comes clears them.
func (s *slowL3) waitHealthy(t *testing.T) {
	t.Helper()
	if !testenv.Eventually(func() bool { return s.via.Healthy(context.Background()) == nil }) {
		t.Fatal("the L3 never answered once healed")
	}
}

// warm leaves several live connections through the proxy idle in the
// regions' pool, healed: each of warmConns concurrent probes holds one
// until it is answered. A lease made once the latency is on then finds
// one idle even while give-backs in the background hold others, and goes
// out at once; on a new connection it would wait its deadline out on the
// connection's HELLO, whose reply the latency delays, and never be sent.
func (s *slowL3) warm(t *testing.T) {
	t.Helper()
	const warmConns = 8
	if !testenv.Eventually(func() bool {
		var wg sync.WaitGroup
		var failed atomic.Bool
		for range warmConns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s.via.Healthy(context.Background()) != nil {
					failed.Store(true)
				}
			}()
		}
		wg.Wait()
		return !failed.Load()
	}) {
		t.Fatal("the L3 never answered the probes warming the pool")
	}
}

// redisSlowL3 is a real Redis as L3, behind a proxy; the regions' clients
// fail fast (no retries: a retried lease could be granted twice).
func redisSlowL3(t *testing.T) *slowL3 {
	srv := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, srv.Addr)
	coordinator := func(timeout time.Duration) federation.Coordinator {
		// MinIdleConns: see warm.
		client := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MinIdleConns: 16})
		t.Cleanup(func() { _ = client.Close() })
		c, err := redisfed.NewCoordinator(client, redisstore.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// The test's own reads around the proxy are not what it measures:
	// they wait testenv.StoreDeadline.
	direct, err := redisfed.NewCoordinator(newFastClient(t, srv.Addr), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	return &slowL3{proxy: proxy, via: coordinator(slowTimeout), patient: coordinator(patientTimeout), direct: direct,
		timeout: slowTimeout, delay: 5 * time.Millisecond, lateCounted: true, addr: srv.Addr}
}

// postgresSlowL3 is a real PostgreSQL as L3, the regions' pool connecting
// through a proxy (pgx bounds each call by its context alone).
func postgresSlowL3(t *testing.T) *slowL3 {
	pg := testenv.StartPostgres(t)
	proxy := testenv.StartProxy(t, pg.Addr)
	coordinator := func(url string) federation.Coordinator {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		c, err := pgcoord.New(context.Background(), pool, pgcoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	direct := coordinator(pg.URL())
	via := coordinator("postgres://postgres@" + proxy.Addr + "/postgres?sslmode=disable")
	return &slowL3{proxy: proxy, via: via, patient: via, direct: direct, timeout: slowTimeout, delay: 2 * time.Millisecond}
}

// counted returns the units the coordinator counts as taken from key in
// the window of now — granted, and not given back — leaving it as it was:
// a lease of the whole limit is denied, reporting what remains, unless
// nothing was taken, and then it is given back.
func counted(t *testing.T, c federation.Coordinator, key string, rule gale.Rule, now time.Time) int64 {
	t.Helper()
	ctx := context.Background()
	g, err := c.Lease(ctx, key, rule, rule.Limit, rule.Limit, now)
	if err != nil {
		t.Fatalf("reading the coordinator's count: %v", err)
	}
	if g.Granted == 0 {
		return rule.Limit - g.Decision.Remaining
	}
	rec := federation.Reconcile{Leftover: g.Granted, WindowEnd: g.WindowEnd, Token: fmt.Sprintf("peek/%d", now.UnixMicro()), Now: now}
	if got, err := c.Reconcile(ctx, key, rule, rec); err != nil || got != federation.Applied {
		t.Fatalf("giving back the count's lease: %v %v", got, err)
	}
	return 0
}

// slowPhase is the L3's latency over one burst: from as it begins, and to,
// switched once the burst is under way.
type slowPhase struct{ from, to l3Latency }

// slowWindow is a window of adversarial's three bursts (at its start, at a
// random instant, in its last microsecond), with the L3's latency over each.
type slowWindow struct {
	name   string
	bursts [3]slowPhase
}

// stalled reports whether no answer from the L3 can come in time in the
// whole window.
func (w slowWindow) stalled() bool {
	for _, b := range w.bursts {
		if b.from != latencyAbove || b.to != latencyAbove {
			return false
		}
	}
	return true
}

func steady(lat l3Latency) [3]slowPhase {
	return [3]slowPhase{{lat, lat}, {lat, lat}, {lat, lat}}
}

// slowHotChecks is how many times each process of a burst's hot region
// checks on the slow timeline: with the other regions' few, a window's
// three bursts ask more than the limit for every K, but its first rarely
// takes it all, so that bursts run while leases still cross to the L3.
const slowHotChecks = 8

// slowTimeline is the windows TestFederatedBoundSlowL3 drives, in order.
// A region whose call failed leaves the L3 alone for ProbeAfter (1 s of
// the fake clock), so a window's first burst after a last burst far above
// the timeout fails fast whatever the latency: a fail-closed denial too.
var slowTimeline = []slowWindow{
	{"below the timeout", steady(latencyBelow)},
	{"raised mid-burst", [3]slowPhase{{latencyBelow, latencyBelow}, {latencyBelow, latencyAbove}, {latencyAbove, latencyAbove}}},
	{"far above the timeout", steady(latencyAbove)},
	{"healed mid-burst", [3]slowPhase{{latencyAbove, latencyAbove}, {latencyAbove, latencyBelow}, {latencyBelow, latencyBelow}}},
	{"toggled burst by burst", [3]slowPhase{{latencyBelow, latencyBelow}, {latencyAbove, latencyAbove}, {latencyBelow, latencyBelow}}},
	{"below again", steady(latencyBelow)},
}

// TestFederatedBoundSlowL3: the K-region bound on real servers — each
// region's own redis-server as L2, a real Redis (then PostgreSQL) as L3 —
// with the L3's replies delayed by a proxy on adversarial timelines: below
// the regions' timeout, far above it, and changed while bursts are in
// flight. For K ∈ {1, 2, 4, 8}: no window admits more than the coordinator
// counts as taken in it, which is at most the limit; a window the L3
// cannot answer in admits nothing, every check a fail-closed denial (no
// error); below the timeout, load far above the limit admits exactly it;
// and a lease the L3 granted but answered too late is lost to the window,
// counted once on the coordinator, never admitted.
func TestFederatedBoundSlowL3(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *slowL3
	}{
		{"redis", redisSlowL3},
		{"postgres", postgresSlowL3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every server starts before either backend runs (t.Parallel
			// waits for the loop to end): a server starting picks a free
			// port, and could pick the one a healing proxy lets go of for
			// an instant (Heal stops and restarts its listener).
			l3 := tc.start(t)
			b := realRegions(t, nil)
			for r := range 8 {
				b.escrow(t, r) // starts region r's redis-server
			}
			t.Parallel() // each on its own servers and proxy: the time is mostly spent waiting out timeouts
			for _, k := range []int{1, 2, 4, 8} {
				t.Run(fmt.Sprintf("K=%d", k), func(t *testing.T) {
					runSlowL3(t, b, l3, k)
				})
			}
		})
	}
}

func runSlowL3(t *testing.T, b backends, l3 *slowL3, k int) {
	rule := perMinute
	p := rule.Period
	const regionBatch = 10
	via := &deadlineCoordinator{Coordinator: l3.via} // what lateLease judges its lease by
	f := newFederatedFleet(t, b, fleetConfig{regions: k, processes: 3, rule: rule, batch: 4, regionBatch: regionBatch,
		coord: via, storeTimeout: l3.timeout})
	t0 := storetest.Timeline()
	rng := rand.New(rand.NewPCG(uint64(k), 11))
	for w, win := range slowTimeline {
		start := t0.Add(time.Duration(w) * p)
		end := start.Add(p)
		hot := rng.IntN(k)
		checks, failed := f.checks.Load(), f.failClosed.Load()
		for i, at := range []time.Duration{0, time.Duration(rng.Int64N(int64(p))), p - time.Microsecond} {
			ph := win.bursts[i]
			l3.set(ph.from)
			begun, admitted := f.checks.Load(), f.in(end)
			wait, done := f.burst(rng, start.Add(at), hot, slowHotChecks), make(chan struct{})
			go func() { wait(); close(done) }()
			if ph.to != ph.from {
				// Under way: below the timeout, the L3 has answered leases
				// of the burst (it admits); far above it, every process has
				// begun checking (its lease waits on the L3).
				underWay := func() bool { return f.in(end) > admitted }
				if ph.from == latencyAbove {
					underWay = func() bool { return f.checks.Load() >= begun+int64(3*k) }
				}
				if !testenv.Eventually(func() bool { return underWay() || isClosed(done) }) {
					t.Fatalf("window %d (%s): burst %d never got under way", w, win.name, i)
				}
				if isClosed(done) {
					t.Logf("window %d (%s): burst %d was over before the latency changed", w, win.name, i)
				}
				l3.set(ph.to)
			}
			<-done
		}
		got, taken := f.in(end), counted(t, l3.direct, f.key, rule, end.Add(-time.Microsecond))
		if got > taken || taken > rule.Limit {
			t.Fatalf("window %d (%s) admitted %d; the coordinator counts %d taken in it, of the limit %d", w, win.name, got, taken, rule.Limit)
		}
		if win.stalled() {
			n, fc := f.checks.Load()-checks, f.failClosed.Load()-failed
			if got != 0 || fc != n {
				t.Fatalf("window %d (%s): admitted %d, %d of %d checks fail-closed denials; want none admitted, every check denied fail-closed", w, win.name, got, fc, n)
			}
		}
		t.Logf("window %d (%s): admitted %d, coordinator counts %d", w, win.name, got, taken)
	}
	if most := f.most(); most > rule.Limit {
		t.Fatalf("a window admitted %d > limit %d", most, rule.Limit)
	}

	// A lease the L3 answers after its caller gave up: the check is a
	// fail-closed denial, and what the L3 granted it is counted there,
	// once, and never admitted.
	for attempt := 0; ; attempt++ {
		if lateLease(t, f, l3, via, t0.Add(time.Duration(len(slowTimeline)+2*attempt)*p), regionBatch, attempt) {
			break
		}
	}

	// Below the timeout, load far above the limit reaches it: exactly, on
	// a fleet of its own whose processes wait up to patientTimeout.
	l3.set(latencyBelow)
	tight := newFederatedFleet(t, b, fleetConfig{regions: k, processes: 3, rule: rule, batch: 4, regionBatch: regionBatch,
		coord: l3.patient, storeTimeout: patientTimeout})
	for w := range 2 {
		start := t0.Add(time.Duration(w) * p)
		tight.storm(start, int(rule.Limit))
		tight.storm(start.Add(30*time.Second), int(rule.Limit))
		got, taken := tight.in(start.Add(p)), counted(t, l3.direct, tight.key, rule, start.Add(p-time.Microsecond))
		if got != rule.Limit || taken != rule.Limit {
			t.Fatalf("window %d, the L3's latency below the timeout, under load far above the limit: admitted %d, the coordinator counts %d taken; want exactly the limit %d",
				w, got, taken, rule.Limit)
		}
	}
}

// lateLeaseAttempts is how many times lateLease may find that its lease
// never reached the L3 before the test fails.
const lateLeaseAttempts = 3

// lateLease checks a lease the L3 answers after its caller gave up, in the
// window after the one starting at heal: the check is a fail-closed
// denial, after one lease that reached the L3's client (via, f's
// coordinator, records it) with the check's own deadline, slowTimeout from
// when the check began, and ended at it; what the L3 granted it is counted
// there, regionBatch units, once, and never admitted — the window admits
// exactly the limit less them. It reports false, saying so, when the
// premise did not hold: on a starved machine the lease can fail before it
// goes out (its deadline spent on the escrow), and then it is not the case
// under test, and the caller makes the run again in later windows.
func lateLease(t *testing.T, f *federatedFleet, l3 *slowL3, via *deadlineCoordinator, heal time.Time, regionBatch int64, attempt int) bool {
	t.Helper()
	rule, p := f.rule, f.rule.Period
	// Region 0's process 0 — the one that checks below — may have marked
	// the L3 down (a lease of the last burst timed out): then its next
	// lease probes the L3 first, and the probe, delayed, fails it before
	// it goes out. A check answered by the L3 in the window before makes
	// it healthy; its first is a window's first lease, which the escrow
	// cannot serve. Each try is ProbeAfter after the last.
	l3.set(latencyNone)
	l3.waitHealthy(t) // and a connection open before the latency, for the lease to go out on
	for i := 0; ; i++ {
		if d := f.check(0, 0, heal.Add(time.Duration(i)*2*federation.DefaultProbeAfter)); d.Allowed && !d.Fallback {
			break
		}
		if i == 10 {
			t.Fatalf("region 0 never answered by the L3 once healed, in %d checks", i+1)
		}
	}
	start := heal.Add(p)
	at := start.Add(time.Second)
	l3.warm(t)
	var watch *leaseWatch
	if l3.addr != "" {
		watch = watchLeases(t, l3.addr, f.key)
	}
	// Region 0's escrow may hold a dead balance (units left of an ended
	// window): the Region releases it and queues its give-back rather than
	// spend this lease's deadline on it, so the lease below goes out.
	l3.set(latencyAbove)
	via.take()
	began := time.Now()
	if d := f.check(0, 0, at); d.Allowed || !d.Fallback {
		t.Fatalf("a check whose lease the L3 answers too late: %+v, want a fail-closed denial", d)
	}
	var lease *coordCall
	for _, c := range via.take() { // a reconcile in the background may be there too
		if c.op == "lease" {
			if lease != nil {
				t.Fatalf("the check made two leases: %v, then %v", lease, c)
			}
			lease = &c
		}
	}
	l3.set(latencyNone)
	l3.waitHealthy(t)
	sent := -1 // unknown: Postgres is not watched
	if watch != nil {
		sent = watch.stop(t)
	}
	late := counted(t, l3.direct, f.key, rule, at)
	// notTheCase says why the premise did not hold, and fails once it has
	// not held in lateLeaseAttempts.
	notTheCase := func(why string) bool {
		t.Helper()
		if attempt+1 >= lateLeaseAttempts {
			t.Fatalf("in %d attempts the lease to be answered too late never reached the L3 (the last %s): this machine is too loaded to set the case up", attempt+1, why)
		}
		t.Logf("attempt %d: the lease to be answered too late never reached the L3 (%s: the machine is loaded); again in a later window", attempt, why)
		return false
	}
	if lease == nil {
		if late != 0 {
			t.Fatalf("the L3 counts %d units taken in a window no lease reached it in", late)
		}
		return notTheCase(fmt.Sprintf("check's %v deadline was spent before its lease reached the L3's client", l3.timeout))
	}
	// The lease's deadline is the check's own, its StoreTimeout counted
	// from a moment between the check's start and the lease's arrival; the
	// L3 answering far later, only that deadline could end it.
	switch {
	case lease.deadline.IsZero():
		t.Fatalf("the lease the L3 answers too late had no deadline: %v", lease)
	case lease.deadline.Sub(began) < l3.timeout || lease.deadline.Sub(lease.arrived) > l3.timeout:
		t.Fatalf("the lease's deadline was %v after the check began and %v after it reached the L3's client; want the check's %v StoreTimeout, from when it began",
			lease.deadline.Sub(began), lease.deadline.Sub(lease.arrived), l3.timeout)
	case !lease.endedAtDeadline():
		t.Fatalf("the lease the L3 answers too late: %v; want it ended at its deadline", lease)
	}
	switch {
	case l3.lateCounted && sent == 0 && late == 0:
		// Not the case under test: the L3 never saw the lease.
		return notTheCase(fmt.Sprintf("lease reached the L3's client with %v left of its deadline, and Redis never ran it", lease.deadline.Sub(lease.arrived).Round(time.Millisecond)))
	case l3.lateCounted && late != regionBatch:
		t.Fatalf("the L3 counts %d units taken by the lease it answered too late (it ran %d such leases), want its %d, once", late, sent, regionBatch)
	case !l3.lateCounted && late != 0:
		t.Fatalf("the L3 counts %d units taken by a lease that never committed, want 0", late)
	}
	failed := f.failClosed.Load()
	f.storm(at.Add(2*federation.DefaultProbeAfter), int(rule.Limit))
	f.storm(start.Add(30*time.Second), int(rule.Limit))
	got := f.in(start.Add(p))
	if got > rule.Limit-late {
		t.Fatalf("the window admitted %d > the limit %d less the %d units granted too late: the late grant was admitted", got, rule.Limit, late)
	}
	// Exactly that, unless a lease of the storms failed too (a machine
	// too slow for slowTimeout): each failure leaves fail-closed denials.
	if fc := f.failClosed.Load() - failed; fc == 0 && got != rule.Limit-late {
		t.Fatalf("the window admitted %d, want exactly %d: the limit %d less the %d units granted too late", got, rule.Limit-late, rule.Limit, late)
	} else if fc > 0 {
		t.Logf("%d checks denied fail-closed after healing (a lease timed out): the window admitted %d ≤ %d, not checked for exactness", fc, got, rule.Limit-late)
	}
	return true
}

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
