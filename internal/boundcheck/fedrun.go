package boundcheck

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// FedBackends makes a federated run's shared parts: the coordinator, and
// region r's escrow and the store its regional budget is counted on. Each
// is driven on the now it is passed (a coordinator, escrow or store on its
// callers' clock): the run passes each its own clock's.
type FedBackends struct {
	Coordinator func() federation.Coordinator
	Escrow      func(region int) federation.Escrow
	Fallback    func(region int) gale.Store
}

// MemoryFederation is every part in memory, fresh for each run.
func MemoryFederation() FedBackends {
	return FedBackends{
		Coordinator: func() federation.Coordinator { return federation.NewMemoryCoordinator(nil) },
		Escrow:      func(int) federation.Escrow { return federation.NewMemoryEscrow() },
		Fallback:    func(int) gale.Store { return memstore.New() },
	}
}

// PlayFederation runs sc on parts from b (key names the run's counter
// apart from other runs') and returns what each check's client was told.
// Steps run one at a time, each settled before the next (its lease, the
// limiter's background work and the reconciles its region retries), so a
// run is a function of its schedule. An error is the fleet's or the run's,
// not a judgement.
func PlayFederation(ctx context.Context, sc FedSchedule, b FedBackends, key string) ([]Told, error) {
	f := &fedRun{rule: gale.Rule{Algorithm: gale.FixedWindow, Limit: sc.Spec.Limit, Period: Window}, probe: sc.Spec.ProbeAfter}
	coord := b.Coordinator()
	procs := make([][]*fedProcess, len(sc.Spec.Regions))
	defer func() {
		for _, ps := range procs {
			for _, p := range ps {
				p.close(true)
			}
		}
	}()
	for r, reg := range sc.Spec.Regions {
		g := &fedRegion{FedRegion: reg, name: fmt.Sprintf("r%d", r),
			coord: &cutCoordinator{Coordinator: coord, run: f, cuts: sc.Cuts, region: r}}
		regional := func() time.Time { return f.now().Add(reg.Skew) }
		if reg.Escrow {
			g.escrow = skewedEscrow{b.Escrow(r), regional}
		}
		if reg.Outage == federation.RegionalOnly {
			g.fallback = skewedStore{b.Fallback(r), regional}
		}
		for i, skew := range reg.Procs {
			p := &fedProcess{region: g, skew: skew, name: fmt.Sprintf("p%d", i)}
			if err := f.start(p, true); err != nil {
				return nil, err
			}
			procs[r] = append(procs[r], p)
		}
	}
	told := make([]Told, len(sc.Steps))
	for i, st := range sc.Steps {
		f.at.Store(int64(st.At))
		p := procs[st.Region][st.Proc]
		now := Start.Add(st.At + p.skew)
		p.clock.Set(now)
		var err error
		switch st.Kind {
		case FedCheck:
			var d gale.Decision
			if d, err = p.lim.Check(ctx, key, st.Cost, now); err == nil {
				err = p.lim.Settle(ctx)
			}
			told[i].Admitted = d.Allowed
		case FedReload, FedRestart:
			fresh := st.Kind == FedRestart
			p.close(fresh)
			if fresh {
				p.gen++
			}
			err = f.start(p, fresh)
		}
		if err == nil {
			err = f.failed()
		}
		if err != nil {
			return nil, fmt.Errorf("step #%d (%v): %w", i, st, err)
		}
	}
	return told, nil
}

// fedRegion is a region of a run: its parts, shared by its processes.
type fedRegion struct {
	FedRegion
	name     string
	coord    *cutCoordinator
	escrow   federation.Escrow
	fallback gale.Store
}

// fedProcess is a process of a run: a leased limiter over a Region of its
// own, on its own clock.
type fedProcess struct {
	region *fedRegion
	name   string
	gen    int // restarts so far: a restarted process is another instance
	skew   time.Duration
	clock  *clock.Fake // the limiter's: the process's clock at its last step
	state  *federation.RuleState
	health *federation.Health
	reg    *federation.Region
	lim    *gale.Limiter
}

// start gives p a Region and a limiter over it; fresh, a new process's
// (its own RuleState and Health), otherwise a reload's (p's kept).
func (f *fedRun) start(p *fedProcess, fresh bool) error {
	now := Start.Add(time.Duration(f.at.Load()) + p.skew)
	if fresh {
		p.state, p.health = federation.NewRuleState(nil), federation.NewHealth(f.probe)
	}
	g := p.region
	reg, err := federation.NewRegion(federation.RegionConfig{
		Name: g.name, Instance: fmt.Sprintf("%s.%d", p.name, p.gen), Coordinator: g.coord, Health: p.health,
		Escrow: g.escrow, Batch: g.Batch, Outage: g.Outage, Fallback: g.fallback, RegionalLimit: g.RegionalLimit,
		State:   p.state,
		Timeout: time.Hour, // a retried reconcile is never given up: the run waits for it
	})
	if err != nil {
		return err
	}
	p.reg, p.clock = reg, clock.NewFake(now)
	p.lim, err = gale.New(settledRegion{reg, g.coord, f}, gale.Config{
		Rule: f.rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: g.ProcBatch},
		OnStoreError: gale.FailClosed, StoreTimeout: time.Hour, Clock: p.clock,
	})
	return err
}

// close closes p's limiter, which gives its credits back through its
// Region at the process's clock, and, ending, its RuleState.
func (p *fedProcess) close(ending bool) {
	if p.lim == nil {
		return
	}
	_ = p.lim.Close(context.Background()) // a failed give-back only under-admits
	p.reg.Close()
	if ending {
		p.state.Close()
	}
	p.lim = nil
}

// fedRun is one run's coordinator clock, which the player moves check by
// check, and the first error of its harness.
type fedRun struct {
	rule  gale.Rule
	probe time.Duration // ProbeAfter
	at    atomic.Int64  // the coordinator's clock, since Start
	mu    sync.Mutex
	err   error
}

func (f *fedRun) now() time.Time { return Start.Add(time.Duration(f.at.Load())) }

func (f *fedRun) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *fedRun) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Errors the cut coordinator answers.
var (
	errCut  = errors.New("boundcheck: the coordinator is cut off")
	errLost = errors.New("boundcheck: the coordinator's reply was lost")
)

// cutCoordinator is one region's way to the coordinator: on the
// coordinator's clock (whatever now its caller passes), and cut off while
// a Cut of the region's holds. It counts the leases it answered.
type cutCoordinator struct {
	federation.Coordinator
	run      *fedRun
	cuts     []Cut
	region   int
	answered atomic.Int64
}

// cut reports whether the region is cut off now, and whether its calls
// still land.
func (c *cutCoordinator) cut() (down, lands bool) {
	at := time.Duration(c.run.at.Load())
	for _, k := range c.cuts {
		if k.Regions&(1<<c.region) != 0 && k.From <= at && at < k.To {
			if !k.Lands {
				return true, false
			}
			down, lands = true, true
		}
	}
	return down, lands
}

func (c *cutCoordinator) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, _ time.Time) (gale.Grant, error) {
	down, lands := c.cut()
	if down && !lands {
		return gale.Grant{}, errCut
	}
	g, err := c.Coordinator.Lease(ctx, key, rule, lo, hi, c.run.now())
	if down {
		return gale.Grant{}, errLost
	}
	if err == nil {
		c.answered.Add(1)
	}
	return g, err
}

func (c *cutCoordinator) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	down, lands := c.cut()
	if down && !lands {
		return 0, errCut
	}
	rec.Now = c.run.now()
	got, err := c.Coordinator.Reconcile(ctx, key, rule, rec)
	if down {
		return 0, errLost
	}
	return got, err
}

func (c *cutCoordinator) Healthy(ctx context.Context) error {
	if down, _ := c.cut(); down {
		return errCut
	}
	return c.Coordinator.Healthy(ctx)
}

// settledRegion is a process's Region as its limiter sees it: a lease the
// coordinator answered returns once the reconciles it set its region
// retrying (in the background) are settled, so that none lands during a
// later check. They are all sent on the coordinator's clock of the lease,
// which answered, so they all settle.
type settledRegion struct {
	*federation.Region
	coord *cutCoordinator
	run   *fedRun
}

func (s settledRegion) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	before := s.coord.answered.Load()
	g, err := s.Region.Lease(ctx, key, rule, lo, hi, now)
	if s.coord.answered.Load() != before {
		// A bound on a hang, not a judgement: a reconcile that can only
		// fail (the harness's bug) would keep the run waiting forever.
		deadline := time.Now().Add(time.Minute)
		for s.Region.Pending() > 0 {
			if time.Now().After(deadline) {
				s.run.fail(fmt.Errorf("region %s: %d reconciles still pending a minute after an answered lease", s.Region.Name(), s.Region.Pending()))
				break
			}
			runtime.Gosched()
		}
	}
	return g, err
}

// skewedEscrow is a region's escrow on the region's clock.
type skewedEscrow struct {
	federation.Escrow
	clock func() time.Time
}

func (e skewedEscrow) Take(ctx context.Context, key string, lo, hi int64, _ time.Time) (federation.Held, error) {
	return e.Escrow.Take(ctx, key, lo, hi, e.clock())
}

func (e skewedEscrow) Refill(ctx context.Context, key string, n int64, w federation.Window, _ time.Time) (int64, error) {
	return e.Escrow.Refill(ctx, key, n, w, e.clock())
}

func (e skewedEscrow) Release(ctx context.Context, key string, end time.Time, _ time.Time) (int64, error) {
	return e.Escrow.Release(ctx, key, end, e.clock())
}

// skewedStore is a region's own store (its regional budget's) on the
// region's clock.
type skewedStore struct {
	gale.Store
	clock func() time.Time
}

func (s skewedStore) Check(ctx context.Context, key string, rule gale.Rule, cost int64, _ time.Time) (gale.Decision, error) {
	return s.Store.Check(ctx, key, rule, cost, s.clock())
}

func (s skewedStore) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, _ time.Time) (gale.Grant, error) {
	return s.Store.Lease(ctx, key, rule, lo, hi, s.clock())
}

func (s skewedStore) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, _ time.Time) error {
	return s.Store.Return(ctx, key, rule, credits, windowEnd, s.clock())
}

func (s skewedStore) Charge(ctx context.Context, key string, rule gale.Rule, n int64, _ time.Time) (gale.Decision, error) {
	return s.Store.Charge(ctx, key, rule, n, s.clock())
}
