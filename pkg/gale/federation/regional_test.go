package federation_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestRegionalUnitsNeverGoToTheCoordinator (issue 28, hole 2), on real
// Redis escrows and regional stores: region b holds the whole limit of
// 10; region a, in outage, leases a unit from its regional budget; the
// coordinator comes back and a gives the unit back. The region once
// reconciled regional units to the coordinator, which granted b them
// again: 15 granted against 10 (pkg/gale/model keeps that hole,
// FaultRegionalToCoordinator, found). They are lost to the regional budget
// instead (issue 40: a paced budget takes no give-backs), and its next
// slot comes at its time.
func TestRegionalUnitsNeverGoToTheCoordinator(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault federation.RegionFault
		// granted is what the coordinator grants in the window.
		granted int64
	}{
		{"fixed", 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
			coord := newSwitchable()
			b := realRegions(t, nil)
			region := func(name string, r int) *federation.Region {
				reg, err := federation.NewRegion(federation.RegionConfig{
					Name: name, Coordinator: coord, Escrow: b.escrow(t, r), Batch: 10,
					Outage: federation.RegionalOnly, Fallback: b.fallback(t, r), RegionalLimit: 5, Fault: tc.fault,
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(reg.Close)
				return reg
			}
			ra, rb := region("a", 0), region("b", 1)
			ctx, key, now := context.Background(), fmt.Sprintf("k/%d", time.Now().UnixNano()), storetest.Timeline().Add(10*time.Second)
			if g, err := rb.Lease(ctx, key, rule, 1, 10, now); err != nil || g.Granted != 10 {
				t.Fatalf("b's lease of the whole limit: %+v, %v", g, err)
			}
			coord.down.Store(true)
			g, err := ra.Lease(ctx, key, rule, 1, 5, now)
			if err != nil || g.Granted != 1 || !ra.Down() {
				t.Fatalf("a's lease in outage: %+v, %v (down %v), want 1 from the paced regional budget", g, err, ra.Down())
			}
			if again, err := ra.Lease(ctx, key, rule, 1, 5, now); err != nil || again.Granted != 0 {
				t.Fatalf("a's second lease at the same instant: %+v, %v, want none: one unit per slot (12 s)", again, err)
			}
			coord.down.Store(false)
			if err := ra.Return(ctx, key, rule, 1, g.WindowEnd, now); err != nil {
				t.Fatal(err)
			}
			later := now.Add(2 * time.Second)      // past the probe
			rb.Lease(ctx, key, rule, 1, 10, later) //nolint:errcheck // what it got is read from the coordinator's count
			if got := coord.grantedIn(time.UnixMicro(windowEnd(rule, later))); got != tc.granted {
				t.Fatalf("the coordinator granted %d in the window, want %d", got, tc.granted)
			}
			coord.down.Store(true)
			if left, err := ra.Lease(ctx, key, rule, 1, 5, later.Add(2*time.Second)); err != nil || left.Granted != 0 {
				t.Fatalf("a's regional budget after the give-back granted %+v, %v, want none before its next slot", left, err)
			}
			if next, err := ra.Lease(ctx, key, rule, 1, 5, now.Add(12*time.Second)); err != nil || next.Granted != 1 {
				t.Fatalf("a's regional budget at its next slot granted %+v, %v, want 1", next, err)
			}
		})
	}
}

// windowEnd is the end (Unix µs) of rule's window holding now.
func windowEnd(rule gale.Rule, now time.Time) int64 {
	_, end := rule.WindowBounds(now.UnixMicro())
	return end
}

// refusing is a coordinator that refuses leases of keys longer than 64
// bytes (the server answered: ErrRefused), and counts Healthy calls;
// Healthy blocks until release is closed, when it is not nil.
type refusing struct {
	*switchable
	healthy atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (c *refusing) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	if len(key) > 64 {
		return gale.Grant{}, fmt.Errorf("test coordinator: key of %d bytes: %w", len(key), federation.ErrRefused)
	}
	return c.switchable.Lease(ctx, key, rule, lo, hi, now)
}

func (c *refusing) Healthy(ctx context.Context) error {
	c.healthy.Add(1)
	if c.entered != nil {
		c.entered <- struct{}{}
		<-c.release
	}
	return c.switchable.Healthy(ctx)
}

// TestARefusalIsNotAnOutage (issue 28, hole 3, the region's half): a
// request the coordinator answers and refuses (a key it cannot store)
// fails that request alone; it marks no outage, so the rule's other keys,
// and the other rules on the coordinator, go on leasing. Before, any
// error took the whole rule down for probe-after, and one request with a
// long value repeated kept it down.
func TestARefusalIsNotAnOutage(t *testing.T) {
	coord := &refusing{switchable: newSwitchable()}
	health := federation.NewHealth(time.Second)
	regions := make([]*federation.Region, 2)
	for i := range regions {
		r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: coord, Health: health})
		if err != nil {
			t.Fatal(err)
		}
		regions[i] = r
	}
	ctx, now := context.Background(), storetest.Timeline()
	long := string(make([]byte, 8<<10))
	if _, err := regions[0].Lease(ctx, long, perMinute, 1, 1, now); !errors.Is(err, federation.ErrRefused) {
		t.Fatalf("a refused lease: %v, want ErrRefused", err)
	}
	for i, r := range regions {
		if r.Down() {
			t.Fatalf("region %d is down after a refusal", i)
		}
		if g, err := r.Lease(ctx, "short", perMinute, 1, 1, now); err != nil || g.Granted != 1 {
			t.Fatalf("region %d, another key after the refusal: %+v, %v", i, g, err)
		}
	}
	if s := regions[0].Stats(); s.Outages != 0 || s.LeaseErrors != 0 {
		t.Fatalf("stats after a refusal: %+v, want no outage, no lease error", s)
	}
}

// TestHealthIsTheConnections: an outage is the coordinator connection's.
// One rule's failed lease marks every rule on the connection down; once
// the probe is due, one lease probes while the others answer by their
// outage mode (not one Healthy per lease at once); its answer heals all.
func TestHealthIsTheConnections(t *testing.T) {
	coord := &refusing{switchable: newSwitchable()}
	health := federation.NewHealth(time.Second)
	var changes []string // what Notify was told, in order
	var changesMu sync.Mutex
	health.Notify(func(down bool, err error) {
		changesMu.Lock()
		defer changesMu.Unlock()
		changes = append(changes, fmt.Sprintf("down=%v err=%v", down, err))
	})
	var regions []*federation.Region
	for range 8 {
		r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: coord, Health: health})
		if err != nil {
			t.Fatal(err)
		}
		regions = append(regions, r)
	}
	ctx, now := context.Background(), storetest.Timeline()
	coord.down.Store(true)
	if _, err := regions[0].Lease(ctx, "a", perMinute, 1, 1, now); !errors.Is(err, errDown) {
		t.Fatalf("lease with the coordinator down: %v", err)
	}
	calls := coord.calls.Load()
	for i, r := range regions {
		if !r.Down() {
			t.Fatalf("region %d (another rule) is not down after rule 0's failure", i)
		}
		if _, err := r.Lease(ctx, "b", perMinute, 1, 1, now.Add(time.Millisecond)); !errors.Is(err, federation.ErrCoordinatorDown) {
			t.Fatalf("region %d before the probe is due: %v, want ErrCoordinatorDown", i, err)
		}
	}
	if got := coord.calls.Load(); got != calls {
		t.Fatalf("%d calls reached the coordinator before the probe was due, want none", got-calls)
	}
	coord.down.Store(false)
	coord.entered, coord.release = make(chan struct{}), make(chan struct{})
	due := now.Add(2 * time.Second)
	probed := make(chan error, 1)
	go func() {
		_, err := regions[0].Lease(ctx, "c", perMinute, 1, 1, due)
		probed <- err
	}()
	<-coord.entered // one lease is probing
	var wg sync.WaitGroup
	for i, r := range regions[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Lease(ctx, "d", perMinute, 1, 1, due); !errors.Is(err, federation.ErrCoordinatorDown) {
				t.Errorf("region %d while another probes: %v, want ErrCoordinatorDown", i+1, err)
			}
		}()
	}
	wg.Wait()
	close(coord.release)
	if err := <-probed; err != nil {
		t.Fatalf("the probing lease: %v", err)
	}
	if got := coord.healthy.Load(); got != 1 {
		t.Fatalf("%d probes, want 1", got)
	}
	for i, r := range regions {
		if r.Down() {
			t.Fatalf("region %d still down after the probe answered", i)
		}
	}
	changesMu.Lock()
	defer changesMu.Unlock()
	if want := []string{"down=true err=" + errDown.Error(), "down=false err=<nil>"}; fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("Notify was told %q, want the outage once and the recovery once: %q", changes, want)
	}
}

// TestAReplacedRegionKeepsItsReconciles: a policy reload replaces a
// rule's Region; the reconciles its predecessor could not send are
// retried by the new one (they share the rule's RuleState), not dropped,
// and Close waits for the retrier.
func TestAReplacedRegionKeepsItsReconciles(t *testing.T) {
	coord := newSwitchable()
	state := federation.NewRuleState(nil)
	newRegion := func() *federation.Region {
		r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: coord, State: state})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ctx, now := context.Background(), storetest.Timeline()
	old := newRegion()
	g, err := old.Lease(ctx, "k", perMinute, 1, 10, now)
	if err != nil || g.Granted != 10 {
		t.Fatalf("lease: %+v, %v", g, err)
	}
	coord.down.Store(true)
	if err := old.Return(ctx, "k", perMinute, 10, g.WindowEnd, now); err != nil {
		t.Fatal(err)
	}
	if old.Pending() != 1 {
		t.Fatalf("%d reconciles pending, want the one that failed", old.Pending())
	}
	coord.down.Store(false)
	replaced := newRegion() // the reload
	if _, err := replaced.Lease(ctx, "other", perMinute, 1, 1, now.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	state.Close() // waits for the retry the lease began
	if s := replaced.Stats(); s.ReconcileApplied != 1 || s.ReconcileLost != 0 || replaced.Pending() != 0 {
		t.Fatalf("after the reload: %+v, %d pending; want the old region's reconcile applied by the new one", s, replaced.Pending())
	}
	if got, err := coord.Lease(ctx, "k", perMinute, 1, 60, now); err != nil || got.Granted != 60 {
		t.Fatalf("the window after the give-back granted %+v, %v, want all 60 (the 10 given back)", got, err)
	}
}

// skewedStore is a region's store whose clock reads behind the
// coordinator's by lag: every call's now is moved back by it (a Redis whose
// TIME is lag behind the coordinator's, as the fleet sees it).
type skewedStore struct {
	gale.Store
	lag time.Duration
}

func (s skewedStore) Check(ctx context.Context, key string, rule gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	return s.Store.Check(ctx, key, rule, cost, now.Add(-s.lag))
}

func (s skewedStore) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	return s.Store.Lease(ctx, key, rule, lo, hi, now.Add(-s.lag))
}

func (s skewedStore) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	return s.Store.Return(ctx, key, rule, credits, windowEnd, now.Add(-s.lag))
}

func (s skewedStore) Charge(ctx context.Context, key string, rule gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	return s.Store.Charge(ctx, key, rule, n, now.Add(-s.lag))
}

// TestRegionalBudgetHoldsOnASkewedClock (issue 40, item 4), on a real
// Redis as the region's store: the coordinator is unreachable and the
// region's Redis reads 400 ms behind it. Counted in the region store's own
// fixed windows, the regional budget of 5 began a new window 600 ms into
// each of the coordinator's, and a coordinator window admitted 9 or 10.
// Paced, it admits at most 5 in any second, whatever the offset, and
// about 5 in each second under steady demand.
func TestRegionalBudgetHoldsOnASkewedClock(t *testing.T) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Second}
	const regional, windows, perWindow = 5, 6, 20
	for _, lag := range []time.Duration{0, 400 * time.Millisecond, 999 * time.Millisecond} {
		t.Run(fmt.Sprintf("lag %v", lag), func(t *testing.T) {
			coord := newSwitchable()
			coord.down.Store(true) // from the start: the region has no coordinator grant
			b := realRegions(t, nil)
			fallback := b.fallback
			b.fallback = func(t *testing.T, r int) gale.Store { return skewedStore{fallback(t, r), lag} }
			f := newFederatedFleet(t, b, fleetConfig{regions: 1, processes: 2, rule: rule, batch: 4, regionBatch: 10,
				outage: federation.RegionalOnly, regionalLimit: regional, coord: coord})
			t0 := storetest.Timeline()
			for i := range windows * perWindow {
				// Steady demand, evenly spread, alternating processes; the
				// fleet counts each admission in the coordinator's window
				// of its instant.
				f.check(0, i%2, t0.Add(time.Duration(i)*time.Second/perWindow))
			}
			for w := range windows {
				end := t0.Add(time.Duration(w+1) * time.Second)
				got := f.in(end)
				if got > regional {
					t.Errorf("coordinator window %d admitted %d from the regional budget, want at most regional_limit %d", w, got, regional)
				}
				if w > 0 && got < regional-1 {
					t.Errorf("coordinator window %d admitted %d of %d asked, want at least %d: the paced budget serves a unit every period/%d", w, got, perWindow, regional-1, regional)
				}
			}
		})
	}
}
