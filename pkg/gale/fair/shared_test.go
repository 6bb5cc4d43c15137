package fair_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/fair"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// t0 starts a minute window: 1_699_999_980 is a multiple of 60.
var t0 = time.Unix(1_699_999_980, 0)

// leaseCounter is a real store that counts the leases it serves.
type leaseCounter struct {
	gale.Store
	leases atomic.Int64
}

func (c *leaseCounter) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	c.leases.Add(1)
	return c.Store.Lease(ctx, key, rule, min, max, now)
}

func mustShared(t testing.TB, cfg fair.Config, store gale.Store, quantum int64) *fair.Shared {
	t.Helper()
	s, err := fair.NewShared(cfg, store, "tenants", quantum)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSharedLeasesInQuanta(t *testing.T) {
	ctx := context.Background()
	store := &leaseCounter{Store: memstore.New()}
	s := mustShared(t, fair.Config{Limit: 100, Window: time.Minute}, store, 10)
	for i := range 100 {
		d, err := s.Decide(ctx, "a", 1, t0.Add(time.Duration(i)*time.Millisecond))
		if err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
	if n := store.leases.Load(); n != 10 {
		t.Fatalf("%d leases for 100 units in quanta of 10, want 10", n)
	}
	if d, err := s.Decide(ctx, "a", 1, t0.Add(time.Second)); err != nil || d.Allowed || d.Reason != fair.ReasonCap {
		t.Fatalf("call 101: %+v, %v; want a cap denial", d, err)
	}
	// The cap denial above took no lease: the store had said nothing
	// remains. In the next window a call costing more than the quantum
	// leases its cost.
	d, err := s.Decide(ctx, "a", 25, t0.Add(time.Minute))
	if err != nil || !d.Allowed || store.leases.Load() != 11 {
		t.Fatalf("next window: %+v, %v after %d leases", d, err, store.leases.Load())
	}
}

func TestSharedCreditsDieWithTheWindow(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	a := mustShared(t, fair.Config{Limit: 10, Window: time.Minute}, store, 10)
	b := mustShared(t, fair.Config{Limit: 10, Window: time.Minute}, store, 10)
	// a leases the whole window's budget for one unit: b gets nothing.
	if d, _ := a.Decide(ctx, "x", 1, t0); !d.Allowed {
		t.Fatalf("a: %+v", d)
	}
	if d, _ := b.Decide(ctx, "y", 1, t0); d.Allowed || d.Reason != fair.ReasonCap {
		t.Fatalf("b: %+v, want a cap denial", d)
	}
	// In the next window a's 9 leftover credits are gone, and a must lease
	// again, so a and b together still admit at most 10.
	var admitted int64
	for i := range 20 {
		for _, s := range []*fair.Shared{a, b} {
			if d, err := s.Decide(ctx, "x", 1, t0.Add(time.Minute+time.Duration(i))); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				admitted++
			}
		}
	}
	if admitted != 10 {
		t.Fatalf("window 2 admits %d, want 10", admitted)
	}
}

func TestSharedReturnsStoreErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := mustShared(t, fair.Config{Limit: 10, Window: time.Minute}, memstore.New(), 5)
	if d, err := s.Decide(ctx, "a", 1, t0); !errors.Is(err, context.Canceled) || d.Allowed {
		t.Fatalf("Decide = %+v, %v; want context.Canceled", d, err)
	}
}

func TestNewSharedRejectsBadArguments(t *testing.T) {
	cfg := fair.Config{Limit: 10, Window: time.Minute}
	for _, tc := range []struct {
		name    string
		cfg     fair.Config
		store   gale.Store
		quantum int64
	}{
		{"nil store", cfg, nil, 1},
		{"zero quantum", cfg, memstore.New(), 0},
		{"quantum over limit", cfg, memstore.New(), 11},
		{"bad config", fair.Config{Window: time.Minute}, memstore.New(), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := fair.NewShared(tc.cfg, tc.store, "k", tc.quantum); !errors.Is(err, fair.ErrInvalidConfig) {
				t.Fatalf("NewShared = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// fleet runs processes Shared escrows over store, each on its own goroutine,
// through windows windows from begin, of random tenants, costs and instants, and checks
// that the fleet admits at most Limit per window. It returns the fleet's
// admissions per window.
func fleet(t *testing.T, store gale.Store, begin time.Time, processes, windows int, seed uint64) []int64 {
	t.Helper()
	const (
		limit  = 500
		window = time.Second
	)
	cfg := fair.Config{Limit: limit, Window: window, Weights: map[string]float64{"t0": 4, "t1": 2, "t2": 1}}
	ctx := context.Background()
	admitted := make([]int64, windows)
	for w := range windows {
		start := begin.Add(time.Duration(w) * window)
		var total atomic.Int64
		var wg sync.WaitGroup
		for p := range processes {
			s := mustShared(t, cfg, store, 1+int64(p)*7)
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w*processes+p)))
				calls := 50 + r.IntN(300)
				for range calls {
					now := start.Add(time.Duration(r.Int64N(int64(window))))
					tenant := "t" + string(rune('0'+r.IntN(6)))
					cost := 1 + r.Int64N(8)
					d, err := s.Decide(ctx, tenant, cost, now)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						total.Add(cost)
					}
				}
			})
		}
		wg.Wait()
		admitted[w] = total.Load()
		if admitted[w] > limit {
			t.Fatalf("window %d: the fleet admits %d > Limit %d", w, admitted[w], limit)
		}
	}
	return admitted
}

// TestSharedFleetHoldsLimit: several processes' escrows over one memstore,
// with random tenants and demands: Σ admitted per window ≤ Limit, always.
func TestSharedFleetHoldsLimit(t *testing.T) {
	for _, processes := range []int{1, 3, 8} {
		admitted := fleet(t, memstore.New(), t0, processes, 20, 42)
		t.Logf("%d processes: admitted per window %v (Limit 500)", processes, admitted)
	}
}

// TestSharedFleetHoldsLimitRedis is TestSharedFleetHoldsLimit on a real
// redis-server, the store a fleet shares in production.
func TestSharedFleetHoldsLimitRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := testenv.StartRedis(t)
	store, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline}) // judged by what it admits, not latency
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Redis expires keys on its own clock, at the window's end: the timeline
	// must lie ahead of it or the counter is gone as soon as it is written.
	begin := time.Now().Add(48 * time.Hour).Truncate(24 * time.Hour)
	admitted := fleet(t, store, begin, 6, 10, 43)
	t.Logf("6 processes on Redis: admitted per window %v (Limit 500)", admitted)
}

// TestSharedLateCallsLeaseInTheCurrentWindow: a call stamped in the previous
// window, arriving after the process moved on (reordered, or a clock stepping
// back), is counted in the current window and must lease from the store's
// current window too, or the fleet would admit that window's budget twice.
func TestSharedLateCallsLeaseInTheCurrentWindow(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	cfg := fair.Config{Limit: 10, Window: time.Minute}
	p1, p2 := mustShared(t, cfg, store, 1), mustShared(t, cfg, store, 1)
	w2 := t0.Add(time.Minute)
	admitted := map[time.Time]int64{}
	decide := func(p *fair.Shared, now time.Time) {
		d, err := p.Decide(ctx, "x", 1, now)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			admitted[d.ResetAt]++
		}
	}
	decide(p2, w2) // p2 moves to window 2
	for range 10 {
		decide(p1, w2)
		decide(p2, w2.Add(-time.Millisecond)) // stamped in window 1
	}
	if n := admitted[w2.Add(time.Minute)]; n != 10 || len(admitted) != 1 {
		t.Fatalf("admitted %v, want 10 in window 2 alone", admitted)
	}
}

// TestSharedChargeCountsInFull: a charge is counted whole, even past the
// limit, first from the credits the process holds and then on the store's
// counter, where another process sees it; what follows in the window is
// refused. One that fits is allowed; one that does not says how much it
// overran.
func TestSharedChargeCountsInFull(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: time.Minute}
	a := mustShared(t, fair.Config{Limit: 100, Window: time.Minute}, store, 10)
	b := mustShared(t, fair.Config{Limit: 100, Window: time.Minute}, store, 10)
	if d, err := a.Decide(ctx, "x", 1, t0); err != nil || !d.Allowed {
		t.Fatalf("first call: %+v, %v", d, err)
	}
	// a holds 9 credits: a charge of 50 takes them and 41 more from the store.
	if d, err := a.Charge(ctx, "x", 50, t0.Add(time.Second)); err != nil || !d.Allowed || d.Overrun != 0 || d.Admitted != 51 {
		t.Fatalf("charge of 50 of 100 after 1: %+v, %v; want it to fit, 51 admitted", d, err)
	}
	if d, err := a.Charge(ctx, "x", 80, t0.Add(2*time.Second)); err != nil || d.Allowed || d.Overrun != 31 || d.Admitted != 131 {
		t.Fatalf("charge of 80 after 51: %+v, %v; want counted (131), 31 past the limit", d, err)
	}
	if got, err := store.Charge(ctx, "tenants", rule, 0, t0.Add(3*time.Second)); err != nil || got.Allowed {
		t.Fatalf("the store's counter after 131 counted: %+v, %v; want it past the limit", got, err)
	}
	for name, s := range map[string]*fair.Shared{"a": a, "b": b} {
		if d, err := s.Decide(ctx, "y", 1, t0.Add(4*time.Second)); err != nil || d.Allowed {
			t.Errorf("%s: a call after the window's spend passed its limit: %+v, %v; want refused", name, d, err)
		}
	}
	if d, err := b.Decide(ctx, "y", 1, t0.Add(time.Minute)); err != nil || !d.Allowed {
		t.Errorf("next window: %+v, %v; want admitted", d, err)
	}
}
