package federation_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// switchable is a coordinator that can be taken down, and counts the calls
// that reached it and the units it granted per window.
type switchable struct {
	federation.Coordinator
	down    atomic.Bool
	calls   atomic.Int64
	mu      sync.Mutex
	granted map[int64]int64 // window end (µs) → units granted
}

var errDown = errors.New("coordinator taken down by the test")

func newSwitchable() *switchable {
	return &switchable{Coordinator: federation.NewMemoryCoordinator(nil), granted: map[int64]int64{}}
}

func (s *switchable) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return gale.Grant{}, errDown
	}
	g, err := s.Coordinator.Lease(ctx, key, rule, lo, hi, now)
	if err == nil && g.Granted > 0 {
		s.mu.Lock()
		s.granted[g.WindowEnd.UnixMicro()] += g.Granted
		s.mu.Unlock()
	}
	return g, err
}

func (s *switchable) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return 0, errDown
	}
	return s.Coordinator.Reconcile(ctx, key, rule, rec)
}

func (s *switchable) Healthy(ctx context.Context) error {
	s.calls.Add(1)
	if s.down.Load() {
		return errDown
	}
	return nil
}

func (s *switchable) grantedIn(windowEnd time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.granted[windowEnd.UnixMicro()]
}

var perMinute = gale.Rule{Algorithm: gale.FixedWindow, Limit: 60, Period: time.Minute}

// TestFailClosed: with the coordinator gone mid-window, a region serves
// the escrow it holds — no more — then denies; the next window, whose
// grants never came, admits nothing; once the coordinator is back and its
// probe is due, the region leases again.
func TestFailClosed(t *testing.T) {
	coord := newSwitchable()
	b := memoryBackends()
	f := newFederatedFleet(t, b, fleetConfig{regions: 2, processes: 2, rule: perMinute, batch: 4, regionBatch: 10, coord: coord})
	t0 := storetest.Timeline()
	w0 := t0.Add(time.Minute)
	f.storm(t0, 3) // 12 admitted; the regions now hold escrow
	before := f.in(w0)
	held := coord.grantedIn(w0) - before
	if before != 12 || held <= 0 {
		t.Fatalf("before the outage: admitted %d, held %d; want 12 admitted and some escrow held", before, held)
	}
	coord.down.Store(true)
	f.storm(t0.Add(10*time.Second), 20)
	during := f.in(w0) - before
	if during != held {
		t.Fatalf("during the outage the fleet admitted %d, want exactly the %d units of escrow it held", during, held)
	}
	d := f.check(0, 0, t0.Add(11*time.Second))
	if d.Allowed || !d.Fallback {
		t.Fatalf("a check once the escrow is gone: %+v, want a fail-closed denial (Fallback)", d)
	}
	f.storm(t0.Add(time.Minute), 5)
	if got := f.in(t0.Add(2 * time.Minute)); got != 0 {
		t.Fatalf("the next window, with the coordinator still gone, admitted %d, want 0", got)
	}
	coord.down.Store(false)
	f.storm(t0.Add(time.Minute+2*federation.DefaultProbeAfter), 5)
	if got := f.in(t0.Add(2 * time.Minute)); got != 20 {
		t.Fatalf("with the coordinator back and its probe due, the fleet admitted %d of 20 checks, want 20", got)
	}
}

// TestOutageProbesLazily: after a failed lease the coordinator is not asked
// again until ProbeAfter has passed on the callers' clock, and then Healthy
// is asked first; no timer runs meanwhile.
func TestOutageProbesLazily(t *testing.T) {
	coord := newSwitchable()
	coord.down.Store(true)
	r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: coord, ProbeAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, t0 := context.Background(), storetest.Timeline()
	if _, err := r.Lease(ctx, "k", perMinute, 1, 4, t0); !errors.Is(err, errDown) {
		t.Fatalf("first lease: %v, want the coordinator's error", err)
	}
	for i := range 10 {
		if _, err := r.Lease(ctx, "k", perMinute, 1, 4, t0.Add(time.Duration(i)*50*time.Millisecond)); !errors.Is(err, federation.ErrCoordinatorDown) {
			t.Fatalf("lease %d within ProbeAfter: %v, want ErrCoordinatorDown", i, err)
		}
	}
	if got := coord.calls.Load(); got != 1 {
		t.Fatalf("the coordinator was asked %d times within ProbeAfter, want once", got)
	}
	coord.down.Store(false)
	g, err := r.Lease(ctx, "k", perMinute, 1, 4, t0.Add(time.Second))
	if err != nil || g.Granted != 4 {
		t.Fatalf("lease once the probe is due: %+v, %v; want 4 granted", g, err)
	}
	if got := coord.calls.Load(); got != 3 {
		t.Fatalf("the coordinator was asked %d times, want 3 (the failed lease, the probe, the lease)", got)
	}
	if s := r.Stats(); s.Outages != 1 || s.Down {
		t.Fatalf("stats %+v: want one outage, over", s)
	}
}

// TestRegionalOnly: while the coordinator is gone, each region serves its
// escrow, then its regional budget. The stated sub-bound: a window admits
// at most what the coordinator granted in it plus Σ regional limits, and a
// window the outage covers whole, with each regional limit the region's
// static slice, admits at most the limit — exactly it under demand at
// every slot of the paced regional budgets (a minute's 20, one every 3 s).
func TestRegionalOnly(t *testing.T) {
	const k = 3
	slices, err := federation.Partition(perMinute.Limit, k)
	if err != nil {
		t.Fatal(err)
	}
	coord := newSwitchable()
	b := memoryBackends()
	b.fallback = func(*testing.T, int) gale.Store { return memstore.New() }
	f := newFederatedFleet(t, b, fleetConfig{regions: k, processes: 2, rule: perMinute, batch: 4, regionBatch: 10,
		outage: federation.RegionalOnly, regionalLimit: slices[0], coord: coord})
	t0 := storetest.Timeline()
	w0, w1 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	f.storm(t0, 2)
	coord.down.Store(true)
	slot := perMinute.Period / time.Duration(slices[0])
	f.spread(t0.Add(time.Second), slot, 19)
	var sum int64
	for _, s := range slices {
		sum += s
	}
	if got, bound := f.in(w0), coord.grantedIn(w0)+k*slices[0]; got > bound {
		t.Fatalf("the outage's first window admitted %d > granted %d + Σ regional limits %d", got, coord.grantedIn(w0), k*slices[0])
	}
	f.spread(t0.Add(time.Minute), slot, 20)
	if got := f.in(w1); got != sum || sum != perMinute.Limit {
		t.Fatalf("a window the outage covers whole admitted %d, want Σ slices = %d = the limit %d", got, sum, perMinute.Limit)
	}
}

// TestRegionalOnlyNeedsARegionalStore: refused without an escrow, with a
// message saying why.
func TestRegionalOnlyNeedsARegionalStore(t *testing.T) {
	_, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: federation.NewMemoryCoordinator(nil), Outage: federation.RegionalOnly, RegionalLimit: 10})
	if err == nil {
		t.Fatal("regional_only without an L2 accepted")
	}
	t.Log(err)
}
