package federation_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// redisCoordinatorOn is a Redis coordinator on addr, with a client that
// fails fast (newFastClient). Its own bound on a round trip is
// StoreDeadline: a call ends at its caller's deadline, and a lease the test
// does not time is not failed by a loaded machine.
func redisCoordinatorOn(t *testing.T, addr string) federation.Coordinator {
	c, err := redisfed.NewCoordinator(newFastClient(t, addr), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestL3KilledMidWindow: the coordinator's Redis (durable: appendfsync
// always, as a coordinator must run) is killed mid-window. Fail-closed
// regions serve the escrow they hold, no more, then deny; restarted in the
// same window, it remembers what it granted, and the window still admits
// exactly the limit.
func TestL3KilledMidWindow(t *testing.T) {
	l3 := testenv.StartRedisDurable(t)
	coord := &switchable{Coordinator: redisCoordinatorOn(t, l3.Addr), granted: map[int64]int64{}}
	f := newFederatedFleet(t, realRegions(t, nil), fleetConfig{regions: 3, processes: 2, rule: perMinute, batch: 4, regionBatch: 10, coord: coord})
	t0 := storetest.Timeline()
	w0 := t0.Add(time.Minute)
	f.storm(t0, 2)
	before := f.in(w0)
	held := coord.grantedIn(w0) - before
	l3.Kill()
	f.storm(t0.Add(10*time.Second), 10)
	if during := f.in(w0) - before; during > held {
		t.Fatalf("with the coordinator dead the fleet admitted %d, more than the %d units of escrow it held", during, held)
	}
	if d := f.check(1, 0, t0.Add(11*time.Second)); d.Allowed || !d.Fallback {
		t.Fatalf("a check once the escrow is gone: %+v, want a fail-closed denial", d)
	}
	l3.Restart()
	after := t0.Add(10*time.Second + 2*federation.DefaultProbeAfter)
	f.storm(after, 20)
	if got := f.in(w0); got != perMinute.Limit {
		t.Fatalf("the window admitted %d across the coordinator's death and restart, want exactly the limit %d", got, perMinute.Limit)
	}
}

// TestRegionalOnlyOnRealServers: TestRegionalOnly's sub-bound on real
// servers — each region's own redis-server as its L2 and for its regional
// budget, one more as L3 — with the L3 cut mid-window: killed, or
// partitioned by a proxy that holds its replies (leases reach it and are
// granted there, and the answers never come back). The sub-bound as
// README.md and RegionalOnly's doc state it: each region's regional budget
// grants at most its regional limit per window; a window admits at most
// what the coordinator granted in it plus Σ regional limits, and with each
// regional limit the region's static slice, a window the outage covers
// whole admits at most the limit. Under demand at every slot of the paced
// budgets (a minute's 20, one every 3 s) each is reached exactly: the
// regional budget is used, not only bounded. With the L3 back, the regions
// lease from it again (at the first probe due: one every 20 s here) and the
// budget is left alone. Only while it is cut off is a call to the L3 bounded
// by a deadline the test sets (cutTimeout), at which every call the
// partition holds ends; otherwise a loaded machine's round trip does not
// time out.
func TestRegionalOnlyOnRealServers(t *testing.T) {
	for _, tc := range []struct {
		name string
		// start starts the L3 and returns the address the regions reach
		// it at, and how to cut it off and bring it back.
		start func(t *testing.T) (addr string, cut, back func())
	}{
		{"killed", func(t *testing.T) (string, func(), func()) {
			l3 := testenv.StartRedis(t)
			return l3.Addr, l3.Kill, l3.Restart
		}},
		{"partitioned", func(t *testing.T) (string, func(), func()) {
			proxy := testenv.StartProxy(t, testenv.StartRedis(t).Addr)
			return proxy.Addr, func() { proxy.Blackhole("downstream") }, proxy.Heal
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const k, procs = 3, 2
			slices, err := federation.Partition(perMinute.Limit, k)
			if err != nil {
				t.Fatal(err)
			}
			addr, cut, back := tc.start(t)
			l3 := &deadlineCoordinator{Coordinator: redisCoordinatorOn(t, addr)}
			coord := &switchable{Coordinator: l3, granted: map[int64]int64{}}
			// A test failing while the L3 is cut off brings it back before the
			// coordinator's Close waits out a held round trip.
			t.Cleanup(func() {
				if t.Failed() {
					back()
				}
			})
			f := newFederatedFleet(t, realRegions(t, nil), fleetConfig{regions: k, processes: procs, rule: perMinute, batch: 4, regionBatch: 10,
				outage: federation.RegionalOnly, regionalLimit: slices[0], coord: coord, probeAfter: 20 * time.Second})
			// regional is the units region r's regional budget granted so far.
			regional := func(r int) int64 {
				var n int64
				for _, s := range f.stores[r*procs : (r+1)*procs] {
					n += s.Stats().Regional
				}
				return n
			}
			budgets := func() []int64 {
				var b []int64
				for r := range k {
					b = append(b, regional(r))
				}
				return b
			}
			// budgetsUsed checks what each region's regional budget
			// granted since before: want for every region.
			budgetsUsed := func(window string, before []int64, want func(r int) int64) {
				t.Helper()
				for r := range k {
					if got := regional(r) - before[r]; got != want(r) || got > slices[r] {
						t.Fatalf("%s: region %d's regional budget granted %d, want %d (its regional limit is %d)", window, r, got, want(r), slices[r])
					}
				}
			}
			var sum int64
			for _, s := range slices {
				sum += s
			}
			t0 := storetest.Timeline()
			w0, w1, w2 := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)

			f.storm(t0, 2)
			if got := f.in(w0); got != k*procs*2 {
				t.Fatalf("before the outage the fleet admitted %d of %d checks", got, k*procs*2)
			}
			before := budgets()
			l3.take()
			l3.cutFor(cutTimeout)
			cut()
			slot := perMinute.Period / time.Duration(slices[0])
			const slots = 16 // 12 s, 15 s, … 57 s: the slots of the outage's first window, in phase with the next
			f.spread(t0.Add(12*time.Second), slot, slots)
			for r := range k {
				// The escrow and the processes' credits serve the first
				// slots; the budget the rest.
				if got := regional(r) - before[r]; got < 1 || got > slots {
					t.Fatalf("the outage's first window: region %d's regional budget granted %d, want 1..%d (its slots in the window)", r, got, slots)
				}
			}
			granted := coord.grantedIn(w0)
			if got, bound := f.in(w0), granted+sum; got > bound {
				t.Fatalf("the outage's first window admitted %d, want at most the coordinator's grants %d + Σ regional limits %d = %d", got, granted, sum, bound)
			}

			before = budgets()
			f.spread(t0.Add(time.Minute), slot, 20)
			budgetsUsed("a window the outage covers whole", before, func(r int) int64 { return slices[r] })
			for r := range k {
				if got := f.inRegion(r, w1); got != slices[r] {
					t.Fatalf("in a window the outage covers whole region %d admitted %d, want its regional limit %d", r, got, slices[r])
				}
			}
			if got := f.in(w1); got != sum || sum != perMinute.Limit || coord.grantedIn(w1) != 0 {
				t.Fatalf("a window the outage covers whole admitted %d (the coordinator granting %d), want Σ slices = %d = the limit %d", got, coord.grantedIn(w1), sum, perMinute.Limit)
			}

			judgeCut(t, l3.take(), tc.name == "partitioned")
			l3.cutFor(0)
			back()
			// After failed dials the client stops dialing and answers with
			// the last dial error until its own retry (once a second)
			// connects: a probe before then would begin another outage.
			// Wait for the coordinator to answer the test's own ping.
			// Then 32 pings at once, until all pass: the pool hands each
			// an idle connection or a new one, so every connection the
			// kill left dead (each fails one call, the client does not
			// retry) is found by a ping, not by a probe.
			if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool {
				var failed atomic.Int64
				var wg sync.WaitGroup
				for range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if coord.Coordinator.Healthy(context.Background()) != nil {
							failed.Add(1)
						}
					}()
				}
				wg.Wait()
				return failed.Load() == 0
			}) {
				t.Fatalf("the coordinator did not answer within %v of coming back", testenv.StoreDeadline)
			}
			// Each process's first check once a probe is due probes alone
			// (in a storm the others would answer by the outage mode
			// meanwhile); then the storm. After a kill and a restart a
			// process's call can still fail now and then (the client's
			// pool, dialing again, answers some calls with its last dial
			// error): such a call answers by the outage mode, and its
			// regional unit is counted, at most one per process per probe.
			healing := budgets()
			healed := t0.Add(2*time.Minute + 30*time.Second)
			f.storm(healed, 1)
			f.storm(healed, 39)
			var probing int64
			for r, n := range budgets() {
				probing += n - healing[r]
			}
			if probing > 2*int64(k*procs) {
				t.Fatalf("with the coordinator back the regional budgets granted %d, want at most %d (a failed probe per process, twice)", probing, 2*k*procs)
			}
			if probing > 0 {
				t.Logf("with the coordinator back %d calls still failed and took a regional unit", probing)
			}
			// The window admits the coordinator's grants and the regional
			// units counted, no more; the regions lease from the
			// coordinator again; and once no call failed, exactly the
			// limit (a process whose call failed waits for its next probe,
			// 20 s here, answering by the outage mode meanwhile).
			granted = coord.grantedIn(w2)
			if got := f.in(w2); got > granted+probing || granted == 0 {
				t.Fatalf("with the coordinator back the window admitted %d, want at most what the coordinator granted (%d, none is a failure) + the %d regional units failed calls took", got, granted, probing)
			}
			if got := f.in(w2); probing == 0 && got != perMinute.Limit {
				t.Fatalf("with the coordinator back the window admitted %d, want the limit %d, leased from it", got, perMinute.Limit)
			}
		})
	}
}

// TestReconcileRetriedThroughAPartition: a region gives credits back while
// a partition holds the coordinator's replies (the give-back reaches it,
// the answer never returns); healed, the retry with the same token is
// reported Duplicate, and the units went back once — not twice.
func TestReconcileRetriedThroughAPartition(t *testing.T) {
	l3 := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, l3.Addr)
	direct := redisCoordinatorOn(t, l3.Addr)
	via := &deadlineCoordinator{Coordinator: redisCoordinatorOn(t, proxy.Addr)}
	// The retry's Timeout, and the processes' StoreTimeout, are not what the
	// test is about: the give-back held by the partition ends at the
	// deadline the test sets while it holds the replies.
	region, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: via, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			proxy.Heal() // before the coordinator's Close waits out a held round trip
		}
	})
	t0 := storetest.Timeline()
	newProcess := func() *gale.Limiter {
		l, err := gale.New(region, gale.Config{Rule: perMinute, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10},
			OnStoreError: gale.FailClosed, StoreTimeout: testenv.StoreDeadline, Clock: clock.NewFake(t0)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l
	}
	ctx := context.Background()
	a, b := newProcess(), newProcess()
	for range 3 {
		if d, err := a.Check(ctx, "k", 1, t0); err != nil || !d.Allowed {
			t.Fatalf("check: %+v %v", d, err)
		}
	}
	// Load the reconcile script into Redis first (scripts are the
	// server's), so the give-back's first attempt runs there rather than
	// asking for the script and waiting on a held NOSCRIPT.
	if _, err := direct.Reconcile(ctx, "warm-up", perMinute, federation.Reconcile{WindowEnd: t0.Add(time.Minute), Token: "warm-up", Now: t0}); err != nil {
		t.Fatal(err)
	}
	via.take()
	via.cutFor(cutTimeout)
	proxy.Blackhole("downstream")
	_ = a.Close(ctx) // gives its 7 unused credits back: the reply is held
	if s := region.Stats(); s.ReconcileFailed != 1 || region.Pending() != 1 {
		t.Fatalf("after the give-back through the partition: %+v, %d pending; want one failed attempt waiting", s, region.Pending())
	}
	calls := via.take()
	if len(calls) != 1 || calls[0].op != "reconcile" {
		t.Fatalf("calls through the partition: %v; want the one give-back", calls)
	}
	judgeCut(t, calls, true)
	via.cutFor(0)
	proxy.Heal()
	if d, err := b.Check(ctx, "k", 1, t0.Add(time.Second)); err != nil || !d.Allowed {
		t.Fatalf("check after healing: %+v %v", d, err)
	}
	if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool { return region.Pending() == 0 }) {
		t.Fatalf("the reconcile waiting was never retried: %+v", region.Stats())
	}
	if s := region.Stats(); s.ReconcileDuplicate != 1 || s.ReconcileApplied != 0 {
		t.Fatalf("after the retry: %+v; want it reported duplicate (the first attempt had landed)", s)
	}
	// 3 served by a, 10 leased by b: the window holds 60 − 13 = 47, and
	// would hold 54 had the 7 gone back twice.
	g, err := direct.Lease(ctx, "k", perMinute, 1, 60, t0.Add(2*time.Second))
	if err != nil || g.Granted != 47 {
		t.Fatalf("the window has %d left (%v), want 47: the give-back applied once", g.Granted, err)
	}
}

// TestRegionCrashMidWindow: a region's processes crash mid-window, their
// credits lost with them; its new processes take the escrow they left and
// the window admits no more than the limit.
func TestRegionCrashMidWindow(t *testing.T) {
	b := realRegions(t, redisCoordinator(t))
	f := newFederatedFleet(t, b, fleetConfig{regions: 3, processes: 2, rule: perMinute, batch: 4, regionBatch: 10})
	t0 := storetest.Timeline()
	f.storm(t0, 3)
	// Region 1 crashes: its processes are never asked again (and never
	// give their credits back); two new ones join on the same escrow.
	crashed := f.regions[1]
	f.regions[1] = nil
	for p := range 2 {
		reg, err := federation.NewRegion(federation.RegionConfig{Name: "region-1", Instance: fmt.Sprintf("reborn-%d", p),
			Coordinator: f.coord, Escrow: f.escrows[1], Batch: 10})
		if err != nil {
			t.Fatal(err)
		}
		l, err := gale.New(reg, gale.Config{Rule: perMinute, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4}, OnStoreError: gale.FailClosed, Clock: clock.NewFake(t0)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		f.regions[1] = append(f.regions[1], l)
	}
	f.storm(t0.Add(20*time.Second), 30)
	got := f.in(t0.Add(time.Minute))
	if got > perMinute.Limit {
		t.Fatalf("the window admitted %d > the limit %d across a region's crash", got, perMinute.Limit)
	}
	lost := int64(4 * len(crashed)) // at most a batch each
	if got < perMinute.Limit-lost {
		t.Fatalf("the window admitted %d: more was lost than the crashed processes' credits (%d)", got, lost)
	}
}

// newFastClient is a client of addr as the sidecar makes one: no retries (a
// retried command could apply twice), one dial (a dead server refuses at
// once), and every call bounded by its context's deadline
// (ContextTimeoutEnabled): its caller's, or its store's Timeout. Its own
// dial, read and write timeouts are StoreDeadline, so that only a deadline
// a test sets ends a call the test holds.
func newFastClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		DialTimeout: testenv.StoreDeadline, ReadTimeout: testenv.StoreDeadline, WriteTimeout: testenv.StoreDeadline})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
