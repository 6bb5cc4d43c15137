package federation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// backends makes a federation's shared parts: one coordinator (L3) and,
// when escrow is set, one escrow (L2) per region.
type backends struct {
	coord  func(t *testing.T) federation.Coordinator
	escrow func(t *testing.T, region int) federation.Escrow // nil: no L2
	// fallback is a region's own store, for RegionalOnly.
	fallback func(t *testing.T, region int) gale.Store
}

func memoryBackends() backends {
	return backends{
		coord:  func(*testing.T) federation.Coordinator { return federation.NewMemoryCoordinator(nil) },
		escrow: func(*testing.T, int) federation.Escrow { return federation.NewMemoryEscrow() },
	}
}

// federatedFleet is K regions of P processes each: every process a leased,
// window-coupled gale.Limiter over its region's Region. Admissions are
// counted per window of the instant they were admitted at (checks are
// stamped by one clock, which only moves forward); the coordinator's
// windows are on that clock.
type federatedFleet struct {
	t        *testing.T
	rule     gale.Rule
	key      string
	regions  [][]*gale.Limiter
	stores   []*federation.Region // one per process, region-major
	coord    federation.Coordinator
	escrows  []federation.Escrow // one per region; nil entries without
	mu       sync.Mutex
	admitted map[int64]int64 // window end (µs) → admissions
	fallback int64           // admissions from regional budgets (RegionalOnly)
	// byRegion is admitted per region: window end (µs) → admissions.
	byRegion []map[int64]int64
	// checks counts the checks begun; failClosed those answered by the
	// OnStoreError policy (a fail-closed denial, Decision.Fallback).
	checks, failClosed atomic.Int64
}

type fleetConfig struct {
	regions, processes int
	rule               gale.Rule
	batch              int64 // a process's lease
	regionBatch        int64 // a region's lease from L3 (with an escrow)
	noEscrow           bool
	uncoupled          bool // credits outlive their window: the carry-over hole
	outage             federation.Outage
	regionalLimit      int64
	coord              federation.Coordinator // nil: a fresh one from backends
	// storeTimeout is each process's StoreTimeout, which bounds a lease
	// through its Region to the coordinator, and its Region's Timeout;
	// 0 means testenv.StoreDeadline for the one (a lease a test does not
	// time) and the Region's default for the other.
	storeTimeout time.Duration
	// fault breaks every region's machine (a hole the region once had).
	fault federation.RegionFault
	// probeAfter is every Region's ProbeAfter; 0 means its default.
	probeAfter time.Duration
}

func newFederatedFleet(t *testing.T, b backends, c fleetConfig) *federatedFleet {
	t.Helper()
	f := &federatedFleet{t: t, rule: c.rule, key: fmt.Sprintf("fed/%s/%d", t.Name(), time.Now().UnixNano()), admitted: map[int64]int64{}}
	coord := c.coord
	if coord == nil {
		coord = b.coord(t)
	}
	f.coord = coord
	storeTimeout := c.storeTimeout
	if storeTimeout == 0 {
		storeTimeout = testenv.StoreDeadline
	}
	for r := range c.regions {
		f.byRegion = append(f.byRegion, map[int64]int64{})
		var escrow federation.Escrow
		if b.escrow != nil && !c.noEscrow {
			escrow = b.escrow(t, r)
		}
		f.escrows = append(f.escrows, escrow)
		var fallback gale.Store
		if c.outage == federation.RegionalOnly {
			fallback = b.fallback(t, r)
		}
		var procs []*gale.Limiter
		for p := range c.processes {
			reg, err := federation.NewRegion(federation.RegionConfig{
				Name: fmt.Sprintf("region-%d", r), Instance: fmt.Sprintf("p%d", p),
				Coordinator: coord, Escrow: escrow, Batch: c.regionBatch,
				Outage: c.outage, Fallback: fallback, RegionalLimit: c.regionalLimit, Timeout: c.storeTimeout,
				Fault: c.fault, ProbeAfter: c.probeAfter,
			})
			if err != nil {
				t.Fatal(err)
			}
			l, err := gale.New(reg, gale.Config{
				Rule: c.rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: c.batch, Uncoupled: c.uncoupled},
				OnStoreError: gale.FailClosed, StoreTimeout: storeTimeout, Clock: clock.NewFake(storetest.Timeline()),
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close(context.Background()) })
			procs = append(procs, l)
			f.stores = append(f.stores, reg)
		}
		f.regions = append(f.regions, procs)
	}
	return f
}

// check is one request of cost 1 at process p of region r.
func (f *federatedFleet) check(r, p int, now time.Time) gale.Decision {
	f.checks.Add(1)
	d, err := f.regions[r][p].Check(context.Background(), f.key, 1, now)
	if err != nil {
		f.t.Errorf("region %d process %d: %v", r, p, err)
		return d
	}
	if d.Fallback {
		f.failClosed.Add(1)
	}
	if d.Allowed {
		f.mu.Lock()
		if d.WindowEnd.IsZero() {
			f.t.Errorf("an admission at %v names no window", now)
		}
		_, end := f.rule.WindowBounds(now.UnixMicro())
		f.admitted[end]++
		f.byRegion[r][end]++
		f.mu.Unlock()
	}
	return d
}

// most returns the most any window admitted.
func (f *federatedFleet) most() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var most int64
	for _, n := range f.admitted {
		most = max(most, n)
	}
	return most
}

// in returns the admissions of the window ending at windowEnd.
func (f *federatedFleet) in(windowEnd time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.admitted[windowEnd.UnixMicro()]
}

// inRegion returns region r's admissions of the window ending at windowEnd.
func (f *federatedFleet) inRegion(r int, windowEnd time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byRegion[r][windowEnd.UnixMicro()]
}

// storm runs one burst: every process of every region checks n times
// concurrently at now.
func (f *federatedFleet) storm(now time.Time, n int) {
	var wg sync.WaitGroup
	for r := range f.regions {
		for p := range f.regions[r] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					f.check(r, p, now)
				}
			}()
		}
	}
	wg.Wait()
}

// spread runs n storms of one check per process, every apart from from:
// demand that reaches a paced regional budget at each of its slots.
func (f *federatedFleet) spread(from time.Time, every time.Duration, n int) {
	for i := range n {
		f.storm(from.Add(time.Duration(i)*every), 1)
	}
}

// adversarial drives the fleet over windows windows from t0: each window
// sees bursts at random instants, some in its last microsecond (a
// boundary mid-lease: leases begun then land after the next window's
// checks began), and lopsided demand (one region hot in each window).
func (f *federatedFleet) adversarial(rng *rand.Rand, t0 time.Time, windows int) {
	p := f.rule.Period
	for w := range windows {
		start := t0.Add(time.Duration(w) * p)
		hot := rng.IntN(len(f.regions))
		instants := []time.Duration{0, time.Duration(rng.Int64N(int64(p))), p - time.Microsecond}
		for _, at := range instants {
			f.burst(rng, start.Add(at), hot, int(f.rule.Limit))()
		}
	}
}

// burst starts one of adversarial's bursts at now: every process of every
// region checks concurrently, a few times, region hot's hotChecks times
// each. The returned wait returns once the burst is over.
func (f *federatedFleet) burst(rng *rand.Rand, now time.Time, hot, hotChecks int) (wait func()) {
	var wg sync.WaitGroup
	for r := range f.regions {
		n := 1 + rng.IntN(3)
		if r == hot {
			n = hotChecks
		}
		for q := range f.regions[r] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					f.check(r, q, now)
				}
			}()
		}
	}
	return wg.Wait
}

// TestFederatedBound: K regions of several processes, with and without a
// regional escrow, on adversarial timelines: no coordinator window admits
// more than the limit, for K ∈ {1, 2, 4, 8}; and load far above the limit
// reaches it (the tightness case).
func TestFederatedBound(t *testing.T) {
	runFederatedBound(t, memoryBackends())
}

func runFederatedBound(t *testing.T, b backends) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 60, Period: time.Minute}
	for _, k := range []int{1, 2, 4, 8} {
		for _, escrow := range []bool{true, false} {
			t.Run(fmt.Sprintf("K=%d/escrow=%v", k, escrow), func(t *testing.T) {
				f := newFederatedFleet(t, b, fleetConfig{regions: k, processes: 3, rule: rule, batch: 4, regionBatch: 10, noEscrow: !escrow})
				t0 := storetest.Timeline()
				f.adversarial(rand.New(rand.NewPCG(uint64(k), 7)), t0, 6)
				if most := f.most(); most > rule.Limit {
					t.Fatalf("a window admitted %d > limit %d", most, rule.Limit)
				}
				// Far above the limit, every window reaches it.
				for w := 6; w < 9; w++ {
					start := t0.Add(time.Duration(w) * time.Minute)
					f.storm(start, int(rule.Limit))
					f.storm(start.Add(30*time.Second), int(rule.Limit))
					if got := f.in(start.Add(time.Minute)); got != rule.Limit {
						t.Fatalf("window %d under load far above the limit admitted %d, want exactly %d", w, got, rule.Limit)
					}
				}
			})
		}
	}
}

// TestFederatedBoundCatchesCarryOver: the same timelines with credits that
// outlive their window (carry-over across the boundary, the one source of
// overshoot) break the bound, so the test above can fail.
func TestFederatedBoundCatchesCarryOver(t *testing.T) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 60, Period: time.Minute}
	f := newFederatedFleet(t, memoryBackends(), fleetConfig{regions: 4, processes: 3, rule: rule, batch: 4, regionBatch: 10, noEscrow: true, uncoupled: true})
	t0 := storetest.Timeline()
	for w := range 4 {
		start := t0.Add(time.Duration(w) * time.Minute)
		f.storm(start.Add(time.Minute-time.Microsecond), 3) // every process leases a batch at the window's last instant
		f.storm(start.Add(time.Minute), int(rule.Limit))
	}
	if most := f.most(); most <= rule.Limit {
		t.Fatalf("carried-over credits never pushed a window past the limit (most %d): the harness cannot see overshoot", most)
	}
}
