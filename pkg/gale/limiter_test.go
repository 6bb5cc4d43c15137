package gale_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

var (
	start     = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
	perMinute = func(n int64) gale.Rule { return gale.Rule{Algorithm: gale.FixedWindow, Limit: n, Period: time.Minute} }
	bg        = context.Background()
)

// newLimiter returns a limiter for cfg over s, closed on cleanup. A zero
// StoreTimeout is testenv.StoreDeadline here, not gale's 50ms default: a
// test that judges a store timeout sets its own, and the rest judge
// answers, whose store calls a loaded machine must not time out.
func newLimiter(t testing.TB, s gale.Store, cfg gale.Config) *gale.Limiter {
	t.Helper()
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = testenv.StoreDeadline
	}
	l, err := gale.New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(bg) })
	return l
}

func mustCheck(t testing.TB, l *gale.Limiter, key string, cost int64, now time.Time) gale.Decision {
	t.Helper()
	d, err := l.Check(bg, key, cost, now)
	if err != nil {
		t.Fatalf("Check(%q, %d): %v", key, cost, err)
	}
	return d
}

func TestStrictAsksTheStoreEveryTime(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(3)})
	for i, want := range []bool{true, true, true, false, false} {
		if d := mustCheck(t, l, "k", 1, start); d.Allowed != want {
			t.Fatalf("check %d: allowed=%v", i, d.Allowed)
		}
	}
	if got := s.checks.Load(); got != 5 {
		t.Fatalf("store checks = %d, want 5", got)
	}
}

func TestCachedDenyMakesNoStoreCallsUntilRetryAfter(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(5), Mode: gale.CachedDeny})
	now := start.Add(20 * time.Second)
	for i := 0; i < 5; i++ {
		if !mustCheck(t, l, "k", 1, now).Allowed {
			t.Fatalf("check %d denied", i)
		}
	}
	d := mustCheck(t, l, "k", 1, now)
	if d.Allowed || d.RetryAfter != 40*time.Second {
		t.Fatalf("6th check: %+v", d)
	}
	before := s.checks.Load()
	for i := 0; i < 10000; i++ {
		now = now.Add(time.Millisecond) // 10 s in all: still inside the retry-after
		d := mustCheck(t, l, "k", 1, now)
		if d.Allowed || d.RetryAfter != start.Add(time.Minute).Sub(now) {
			t.Fatalf("flood check %d: %+v", i, d)
		}
	}
	if got := s.checks.Load() - before; got != 0 {
		t.Fatalf("10,000 checks on a blocked key made %d store calls, want 0", got)
	}
	if st := l.Stats(); st.CachedDenials != 10000 {
		t.Fatalf("cached denials = %d", st.CachedDenials)
	}
	if mustCheck(t, l, "other", 1, now); s.checks.Load()-before != 1 {
		t.Fatal("another key did not reach the store")
	}
	if d := mustCheck(t, l, "k", 1, start.Add(time.Minute)); !d.Allowed || s.checks.Load()-before != 2 {
		t.Fatalf("after retry-after: %+v, store calls %d", d, s.checks.Load()-before)
	}
}

func TestLeasedServesLocallyAndSurfacesExhaustion(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(100), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}})
	for i := 0; i < 100; i++ {
		if !mustCheck(t, l, "k", 1, start).Allowed {
			t.Fatalf("check %d denied", i)
		}
	}
	d := mustCheck(t, l, "k", 1, start)
	if d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("101st: %+v", d)
	}
	if got := s.leases.Load(); got != 11 {
		t.Fatalf("store leases = %d, want 10 granted + 1 denied", got)
	}
	for i := 0; i < 1000; i++ {
		mustCheck(t, l, "k", 1, start)
	}
	if got := s.leases.Load(); got != 11 {
		t.Fatalf("denied key kept asking: %d leases", got)
	}
	st := l.Stats()
	if st.LocalHits != 90 || st.LeasesGranted != 10 || st.CreditsLeased != 100 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLeasedCostAboveBatchAndPartialGrant(t *testing.T) {
	s := memstore.New()
	l := newLimiter(t, s, gale.Config{Rule: perMinute(25), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}})
	if d := mustCheck(t, l, "k", 12, start); !d.Allowed {
		t.Fatalf("cost 12 > batch: %+v", d)
	}
	// 13 left in the store; 10 leased next, then a partial 3.
	if d := mustCheck(t, l, "k", 13, start); !d.Allowed {
		t.Fatalf("cost 13 of 13 remaining: %+v", d)
	}
	if d := mustCheck(t, l, "k", 1, start); d.Allowed {
		t.Fatalf("over limit admitted: %+v", d)
	}
}

func TestWindowCouplingExpiresCredits(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4}})
	mustCheck(t, l, "k", 1, start.Add(59*time.Second)) // leases 4, holds 3
	if got := s.leases.Load(); got != 1 {
		t.Fatalf("leases %d", got)
	}
	mustCheck(t, l, "k", 1, start.Add(time.Minute)) // credits died with the window
	if got := s.leases.Load(); got != 2 {
		t.Fatalf("next window served from last window's credits (leases %d)", got)
	}
	if st := l.Stats(); st.CreditsStranded != 3 {
		t.Fatalf("stranded %d, want 3", st.CreditsStranded)
	}

	// Uncoupled: the leftovers carry over.
	s2 := &countingStore{Store: memstore.New()}
	u := newLimiter(t, s2, gale.Config{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4, Uncoupled: true}})
	mustCheck(t, u, "k", 1, start.Add(59*time.Second))
	for i := 0; i < 3; i++ {
		mustCheck(t, u, "k", 1, start.Add(time.Minute))
	}
	if got := s2.leases.Load(); got != 1 {
		t.Fatalf("uncoupled credits did not carry over (leases %d)", got)
	}
}

func TestConcurrentMissesCoalesceIntoOneLease(t *testing.T) {
	for _, tc := range []struct {
		name       string
		batch      int64
		wantLeases int64
	}{
		{"batch covers all", 1000, 1},
		{"batch of 10", 10, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &countingStore{Store: memstore.New(), gate: make(chan struct{}), arrived: make(chan struct{}, 1000)}
			l := newLimiter(t, s, gale.Config{Rule: perMinute(5000), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: tc.batch}, StoreTimeout: time.Minute})
			var wg, ready sync.WaitGroup
			var admitted atomic.Int64
			for i := 0; i < 1000; i++ {
				wg.Add(1)
				ready.Add(1)
				go func() {
					defer wg.Done()
					ready.Done()
					d, err := l.Check(bg, "cold", 1, start)
					if err == nil && d.Allowed {
						admitted.Add(1)
					}
				}()
			}
			// Every caller is on its way into Check, and the first lease is
			// held at the store: the rest find it in flight.
			ready.Wait()
			s.waitArrival(t)
			close(s.gate)
			wg.Wait()
			if admitted.Load() != 1000 {
				t.Fatalf("admitted %d of 1000", admitted.Load())
			}
			if got := s.maxInflight.Load(); got != 1 {
				t.Fatalf("%d leases in flight at once, want 1", got)
			}
			if got := s.leases.Load(); got != tc.wantLeases {
				t.Fatalf("leases = %d, want %d", got, tc.wantLeases)
			}
		})
	}
}

func TestStoreErrorPolicies(t *testing.T) {
	for _, mode := range []gale.Mode{gale.Strict, gale.CachedDeny, gale.Leased} {
		for _, tc := range []struct {
			policy  gale.ErrorPolicy
			allowed bool
			err     error
		}{
			{gale.FailError, false, gale.ErrStore},
			{gale.FailOpen, true, nil},
			{gale.FailClosed, false, nil},
		} {
			t.Run(fmt.Sprintf("%v/%v", mode, tc.policy), func(t *testing.T) {
				s := &countingStore{Store: memstore.New()}
				s.failing.Store(true)
				l := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: mode, OnStoreError: tc.policy})
				d, err := l.Check(bg, "k", 1, start)
				if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
				if err == nil && (d.Allowed != tc.allowed || !d.Fallback) {
					t.Fatalf("decision %+v", d)
				}
				if errors.Is(err, gale.ErrStore) && !errors.Is(err, errDown) {
					t.Fatalf("store error lost its cause: %v", err)
				}
				s.failing.Store(false)
				if d := mustCheck(t, l, "k", 1, start); !d.Allowed || d.Fallback {
					t.Fatalf("after recovery: %+v", d)
				}
				if st := l.Stats(); st.StoreErrors == 0 {
					t.Fatal("store error not counted")
				}
			})
		}
	}
}

func TestCancelledCallerGetsContextError(t *testing.T) {
	s := &countingStore{Store: memstore.New(), gate: make(chan struct{}), arrived: make(chan struct{}, 1)}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: gale.Leased, OnStoreError: gale.FailOpen})
	ctx, cancel := context.WithCancel(bg)
	go func() {
		<-s.arrived // the lease is at the store
		cancel()
	}()
	if _, err := l.Check(ctx, "k", 1, start); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	close(s.gate)
	// The grant still lands for the next caller.
	if settle(t, l); l.Stats().LeasesGranted != 1 {
		t.Fatalf("lease never landed: %+v", l.Stats())
	}
	if d := mustCheck(t, l, "k", 1, start); !d.Allowed || s.leases.Load() != 1 {
		t.Fatalf("abandoned lease lost: %+v, leases %d", d, s.leases.Load())
	}
}

func TestFullL1EvictsWithoutOverAdmitting(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4}, MaxKeys: 64, StoreTimeout: time.Minute}) // about eviction, not timeouts: a loaded machine must not time a memory store out
	rng := rand.New(rand.NewPCG(1, 2))
	admitted := map[string]int64{}
	now := start
	for i := 0; i < 50000; i++ {
		if i%10000 == 9999 {
			now = now.Add(time.Minute)
			clear(admitted)
		}
		key := fmt.Sprintf("k%d", rng.IntN(500))
		if mustCheck(t, l, key, 1, now).Allowed {
			admitted[key]++
			if admitted[key] > 10 {
				t.Fatalf("%s admitted %d in one window, limit 10", key, admitted[key])
			}
		}
		if i%1000 == 0 {
			if k := l.Stats().Keys; k > 64 {
				t.Fatalf("L1 holds %d keys, max 64", k)
			}
		}
	}
	st := l.Stats()
	if st.Evictions == 0 || st.CreditsReturned == 0 {
		t.Fatalf("no eviction or return happened: %+v", st)
	}
}

func TestIdleCreditsReturnToTheStore(t *testing.T) {
	clk := clock.NewFake(start)
	s := &countingStore{Store: memstore.New(), returned: make(chan struct{}, 1)}
	a := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10, ReturnIdleAfter: 10 * time.Second}, Clock: clk})
	b := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}})
	mustCheck(t, a, "k", 1, start) // a holds the other 9
	ctx, cancel := context.WithTimeout(bg, testenv.StoreDeadline)
	defer cancel()
	if err := clk.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	select { // the sweeper's return reached the store: b may use it
	case <-s.returned:
	case <-time.After(testenv.StoreDeadline):
		t.Fatalf("idle credits not returned in %v: %+v", testenv.StoreDeadline, a.Stats())
	}
	now := clk.Now()
	for i := 0; i < 9; i++ {
		if !mustCheck(t, b, "k", 1, now).Allowed {
			t.Fatalf("b's check %d denied: returned credits not usable", i)
		}
	}
	if mustCheck(t, b, "x", 1, now); mustCheck(t, b, "k", 1, now).Allowed {
		t.Fatal("over-admitted after the return")
	}
}

func TestLowWaterRefillsInTheBackground(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(1000), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10, LowWater: 3}})
	for i := 0; i < 7; i++ {
		mustCheck(t, l, "k", 1, start) // the 7th leaves 3: a refill starts
	}
	if settle(t, l); l.Stats().LeasesGranted != 2 {
		t.Fatalf("no background refill: %+v", l.Stats())
	}
	// 13 credits held: served without waiting; the refill at 3 left is in
	// the background again.
	for i := 0; i < 10; i++ {
		mustCheck(t, l, "k", 1, start)
	}
	if st := l.Stats(); st.LocalHits != 16 { // the first of the 7 waited for the first lease
		t.Fatalf("local hits %d, want 16", st.LocalHits)
	}
}

func TestCloseReturnsCreditsAndRefusesChecks(t *testing.T) {
	s := memstore.New()
	l, err := gale.New(s, gale.Config{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}, Clock: clock.NewFake(start)})
	if err != nil {
		t.Fatal(err)
	}
	mustCheck(t, l, "k", 1, start)
	if err := l.Close(bg); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(bg); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Check(bg, "k", 1, start); !errors.Is(err, gale.ErrClosed) {
		t.Fatalf("check after close: %v", err)
	}
	if l.Stats().CreditsReturned != 9 {
		t.Fatalf("returned %d", l.Stats().CreditsReturned)
	}
	d, _ := s.Check(bg, "k", gale.Rule(perMinute(10)), 9, start)
	if !d.Allowed {
		t.Fatal("returned credits not back in the store")
	}
}

func TestInvalidConfigAndCost(t *testing.T) {
	s := memstore.New()
	for _, cfg := range []gale.Config{
		{},
		{Rule: perMinute(10), Mode: 9},
		{Rule: perMinute(10), OnStoreError: 7},
		{Rule: perMinute(10), Lease: gale.LeaseConfig{Batch: -1}},
		{Rule: perMinute(10), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 5, LowWater: 5}},
		{Rule: perMinute(10), MaxKeys: -1},
	} {
		if _, err := gale.New(s, cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	if _, err := gale.New(nil, gale.Config{Rule: perMinute(1)}); err == nil {
		t.Error("nil store accepted")
	}
	l := newLimiter(t, s, gale.Config{Rule: perMinute(10), Mode: gale.Leased})
	for _, c := range []int64{0, -1, gale.MaxLimit + 1} {
		if _, err := l.Check(bg, "k", c, start); !errors.Is(err, gale.ErrInvalidCost) {
			t.Errorf("cost %d: %v", c, err)
		}
	}
}

func TestFleetBoundsMemoryStore(t *testing.T) {
	fleetBounds(t, memstore.New(), start)
}

// TestStrictInMemoryAllocatesNothing: a strict check on an in-memory store
// puts no deadline on the call (gale.InMemory): with one it cost 4
// allocations and three quarters of its time.
func TestStrictInMemoryAllocatesNothing(t *testing.T) {
	l := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(1 << 30), Mode: gale.Strict})
	if n := testing.AllocsPerRun(100, func() { mustCheck(t, l, "k", 1, start) }); n != 0 {
		t.Fatalf("a strict check on memstore allocates %v times, want 0", n)
	}
}

// TestCheckBytesKeepsNoReference: CheckBytes reads the key's bytes during the
// call only. A caller reusing its buffer for another key gets another key,
// and the first keeps its credits.
func TestCheckBytesKeepsNoReference(t *testing.T) {
	l := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(100), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}})
	buf := []byte("a")
	if d, err := l.CheckBytes(bg, buf, 1, start); err != nil || !d.Allowed {
		t.Fatalf("first check: %+v %v", d, err)
	}
	buf[0] = 'b' // the same buffer, another key
	if d, err := l.CheckBytes(bg, buf, 1, start); err != nil || !d.Allowed {
		t.Fatalf("second key: %+v %v", d, err)
	}
	before := l.Stats()
	if d := mustCheck(t, l, "a", 1, start); !d.Allowed || d.Remaining != 8+90 { // its 8 credits and the 90 the store had left
		t.Fatalf("key a after the buffer changed: %+v", d)
	}
	if st := l.Stats(); st.Keys != 2 || st.LocalHits != before.LocalHits+1 || st.LeasesRequested != before.LeasesRequested {
		t.Fatalf("key a lost its credits: %+v (before %+v)", st, before)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = l.CheckBytes(bg, buf, 1, start) }); n != 0 {
		t.Fatalf("a leased CheckBytes on a held key allocates %v times, want 0", n)
	}
}

// TestCloseWithTheStoreDownSaysSoOnce: Close returns every key's credits;
// with the store down it tries each and answers one error counting them,
// naming the first and wrapping its cause — not an error per key, which a
// reload during an outage turned into one log line of thousands of keys.
func TestCloseWithTheStoreDownSaysSoOnce(t *testing.T) {
	s := &countingStore{Store: memstore.New()}
	// Close drains by the limiter's clock: the fake one, at the checks' time.
	l, err := gale.New(s, gale.Config{Rule: perMinute(100), Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}, StoreTimeout: testenv.StoreDeadline, Clock: clock.NewFake(start)})
	if err != nil {
		t.Fatal(err)
	}
	const keys = 50
	for k := range keys {
		mustCheck(t, l, fmt.Sprint("key-", k), 1, start)
	}
	settle(t, l)
	s.failing.Store(true)
	err = l.Close(bg)
	if !errors.Is(err, errDown) {
		t.Fatalf("Close: %v, want it to wrap the store's error", err)
	}
	if got := s.returns.Load(); got != keys {
		t.Errorf("%d returns tried, want one per key (%d)", got, keys)
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("of %d keys", keys)) || strings.Count(msg, "key-") != 1 || len(msg) > 300 {
		t.Fatalf("Close: %q, want one line counting %d keys and naming one", msg, keys)
	}
}
