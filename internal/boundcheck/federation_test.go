package boundcheck

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

var (
	fedSeeds      = flag.Uint64("fed-seeds", 2000, "federated schedules to check with every part in memory")
	fedRedisSeeds = flag.Uint64("fed-redis-seeds", 100, "federated schedules to check on a real Redis (and against memory)")
)

// TestFederationBoundsHold plays seeded federated schedules (-fed-seeds
// from -first-seed) with every part in memory, and (-fed-redis-seeds) on a
// real Redis, and judges every window of the coordinator's clock by its
// row of FederationRows. On Redis every instant is on a whole microsecond
// (what its scripts count in) and every schedule is played in memory too:
// its clients must be told the same there, step for step. A failure is
// shrunk and printed, to replay with -first-seed and -fed-seeds=1; with
// -survey it goes on, and reports each row broken, how often, the first
// seed that broke it, and what its breaking needed (diagnose).
func TestFederationBoundsHold(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		checkFederation(t, *firstSeed, *fedSeeds, fedSetup{backends: MemoryFederation})
	})
	t.Run("redis", func(t *testing.T) {
		if testing.Short() || *fedRedisSeeds == 0 {
			t.Skip("starts redis-server")
		}
		checkFederation(t, *firstSeed, *fedRedisSeeds, fedSetup{backends: redisFederation(t), micro: true, versus: MemoryFederation})
	})
}

// fedSetup is what checkFederation plays schedules on.
type fedSetup struct {
	// backends makes each run's parts.
	backends func() FedBackends
	// micro plays each schedule on whole microseconds (onWholeMicroseconds).
	micro bool
	// versus, when set, makes parts each schedule is played on as well, to
	// be told the same on.
	versus func() FedBackends
}

// checkFederation checks n schedules from seed from, as c says.
func checkFederation(t *testing.T, from, n uint64, c fedSetup) {
	ctx := context.Background()
	checkSeeds(t, from, n, func(seed uint64) (played, error) {
		sc := GenerateFederation(seed)
		if c.micro {
			sc = onWholeMicroseconds(sc)
		}
		key := fmt.Sprintf("fed%d", seed)
		told, err := PlayFederation(ctx, sc, c.backends(), key)
		if err != nil {
			return played{}, fmt.Errorf("%w\n%v", err, sc)
		}
		r := FedResult{Schedule: sc, Violations: JudgeFederation(sc, told)}
		p := played{steps: len(sc.Steps), violations: r.Violations, shrink: func() string {
			k := 0
			small, err := ShrinkFederation(ctx, r, func(cand FedSchedule) (FedResult, error) {
				k++
				return RunFederation(ctx, cand, c.backends(), fmt.Sprintf("%s-s%d", key, k))
			})
			if err != nil {
				t.Logf("shrinking stopped: %v", err)
			}
			return fmt.Sprintf("(%d checks, shrunk to %d in %d runs):\n%s", len(sc.Steps), len(small.Schedule.Steps), k, DescribeFederation(small))
		}}
		if c.versus != nil {
			other, err := PlayFederation(ctx, sc, c.versus(), key)
			if err != nil {
				return played{}, fmt.Errorf("played again: %w\n%v", err, sc)
			}
			if !slices.Equal(told, other) {
				i := 0
				for told[i] == other[i] {
					i++
				}
				p.differs = fmt.Sprintf("step #%d (%v) was told %+v here and %+v played again:\n%v", i, sc.Steps[i], told[i], other[i], sc)
			}
		}
		if r.Failed() && *survey {
			if p.cause, err = diagnose(ctx, sc, c.backends, key); err != nil {
				return played{}, err
			}
		}
		return p, nil
	})
}

// redisFederation is every part on one real Redis, on the callers' clocks
// (ServerTime false: the run's clocks drive it), the coordinator and each
// region's escrow and regional budget under prefixes of their own. Runs
// share them, each on keys of its own.
func redisFederation(t *testing.T) func() FedBackends {
	client := testenv.StartRedis(t).Client()
	coord, err := redisfed.NewCoordinator(client, redisstore.Options{Prefix: "bcfed:l3:", Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coord.Close() })
	var escrows []federation.Escrow
	var fallbacks []gale.Store
	for r := range 4 {
		e, err := redisfed.NewEscrow(client, redisfed.EscrowOptions{Prefix: fmt.Sprintf("bcfed:e%d:", r), Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		s, err := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("bcfed:r%d:", r), Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		escrows, fallbacks = append(escrows, e), append(fallbacks, s)
	}
	return func() FedBackends {
		return FedBackends{
			Coordinator: func() federation.Coordinator { return coord },
			Escrow:      func(r int) federation.Escrow { return escrows[r] },
			Fallback:    func(r int) gale.Store { return fallbacks[r] },
		}
	}
}

// TestFederationPlaysWhatItSays checks the player on scripted schedules
// whose answers are known, so that a clean survey means the fleet was
// driven, not that it admitted nothing: one process leasing one unit at a
// time admits exactly the limit; cut off for a whole window it admits
// nothing fail_closed and exactly its regional limit regional_only, to
// checks every half second (the budget is paced: one unit every 2.5 s).
func TestFederationPlaysWhatItSays(t *testing.T) {
	every := func(at, gap time.Duration, n int) []FedStep {
		var out []FedStep
		for i := range n {
			out = append(out, FedStep{At: at + time.Duration(i)*gap, Cost: 1})
		}
		return out
	}
	burst := func(at time.Duration, n int) []FedStep { return every(at, time.Millisecond, n) }
	one := func(o federation.Outage) FedSpec {
		return FedSpec{Limit: 10, ProbeAfter: time.Second, Regions: []FedRegion{
			{Outage: o, RegionalLimit: 4, Escrow: true, Batch: 1, ProcBatch: 1, Procs: []time.Duration{0}}}}
	}
	whole := []Cut{{From: Window - time.Second, To: 2*Window + time.Second, Regions: 1}}
	for _, tc := range []struct {
		name string
		sc   FedSchedule
		want []int64 // admitted per window
	}{
		{"the limit", FedSchedule{Spec: one(federation.FailClosed), Steps: append(burst(time.Second, 15), burst(Window+time.Second, 15)...)}, []int64{10, 10}},
		{"fail_closed cut off", FedSchedule{Spec: one(federation.FailClosed), Cuts: whole, Steps: append(burst(time.Second, 15), burst(Window+time.Second, 15)...)}, []int64{10, 0}},
		{"regional_only cut off", FedSchedule{Spec: one(federation.RegionalOnly), Cuts: whole, Steps: append(burst(time.Second, 15), every(Window+time.Second, Window/20, 18)...)}, []int64{10, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			told, err := PlayFederation(context.Background(), tc.sc, MemoryFederation(), "k")
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int64, len(tc.want))
			for i, c := range tc.sc.Steps {
				if told[i].Admitted {
					got[c.At/Window] += c.Cost
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("admitted %v per window, want %v", got, tc.want)
			}
		})
	}
}

// TestFederationReplaysExactly: a seed's schedule, played twice, tells
// every client the same: the run is a function of its schedule, so a
// failure replays and shrinks.
func TestFederationReplaysExactly(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		sc := GenerateFederation(seed)
		a, err := PlayFederation(context.Background(), sc, MemoryFederation(), "k")
		if err != nil {
			t.Fatal(err)
		}
		b, err := PlayFederation(context.Background(), sc, MemoryFederation(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("seed %d told its clients differently in two runs", seed)
		}
	}
}

// diagnose plays sc again changed, to tell apart what broke a window: with
// each regional budget counted on the coordinator's clock (issue 40, item
// 4), with every instant on a whole microsecond (the stores count in
// microseconds: what this clears is a rounding), and with both.
func diagnose(ctx context.Context, sc FedSchedule, backends func() FedBackends, key string) (func(Violation) string, error) {
	var runs [3]FedResult
	for i, v := range []struct {
		sc FedSchedule
		b  FedBackends
	}{
		{sc, onCoordinatorsClock(backends(), sc)},
		{onWholeMicroseconds(sc), backends()},
		{onWholeMicroseconds(sc), onCoordinatorsClock(backends(), sc)},
	} {
		r, err := RunFederation(ctx, v.sc, v.b, fmt.Sprintf("%s-d%d", key, i))
		if err != nil {
			return nil, fmt.Errorf("diagnosis %d: %w", i, err)
		}
		runs[i] = r
	}
	broke := func(r FedResult, v Violation) bool {
		return slices.ContainsFunc(r.Violations, func(f Violation) bool {
			return f.Row == v.Row && f.Safety == v.Safety && f.Window == v.Window
		})
	}
	return func(v Violation) string {
		switch {
		case !broke(runs[0], v):
			return "item 4: cleared by the regional budgets on the coordinator's clock"
		case !broke(runs[1], v):
			return "a rounding: cleared by instants on whole microseconds"
		case !broke(runs[2], v):
			return "item 4 and a rounding: cleared by both together"
		}
		return "cleared by neither the regional budgets on the coordinator's clock nor whole microseconds"
	}, nil
}

// onWholeMicroseconds is sc with every instant and clock rounded down to
// the microsecond.
func onWholeMicroseconds(sc FedSchedule) FedSchedule {
	sc.Spec.Regions = slices.Clone(sc.Spec.Regions)
	for r, reg := range sc.Spec.Regions {
		reg.Skew = reg.Skew.Truncate(time.Microsecond)
		reg.Procs = slices.Clone(reg.Procs)
		for p := range reg.Procs {
			reg.Procs[p] = reg.Procs[p].Truncate(time.Microsecond)
		}
		sc.Spec.Regions[r] = reg
	}
	sc.Cuts = slices.Clone(sc.Cuts)
	for i := range sc.Cuts {
		sc.Cuts[i].From, sc.Cuts[i].To = sc.Cuts[i].From.Truncate(time.Microsecond), sc.Cuts[i].To.Truncate(time.Microsecond)
	}
	sc.Steps = slices.Clone(sc.Steps)
	for i := range sc.Steps {
		sc.Steps[i].At = sc.Steps[i].At.Truncate(time.Microsecond)
	}
	return sc
}

// onCoordinatorsClock is b with each region's regional-budget store moved
// back onto the coordinator's clock (the run sets it sc's region's skew
// ahead): a diagnosis, not a fleet serve runs, whose escrow and regional
// budget share the region's Redis.
func onCoordinatorsClock(b FedBackends, sc FedSchedule) FedBackends {
	fallback := b.Fallback
	b.Fallback = func(r int) gale.Store { return shiftedStore{fallback(r), -sc.Spec.Regions[r].Skew} }
	return b
}

// shiftedStore is a store on a clock by ahead of its callers'.
type shiftedStore struct {
	gale.Store
	by time.Duration
}

func (s shiftedStore) Check(ctx context.Context, key string, rule gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	return s.Store.Check(ctx, key, rule, cost, now.Add(s.by))
}

func (s shiftedStore) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	return s.Store.Lease(ctx, key, rule, lo, hi, now.Add(s.by))
}

func (s shiftedStore) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	return s.Store.Return(ctx, key, rule, credits, windowEnd, now.Add(s.by))
}

func (s shiftedStore) Charge(ctx context.Context, key string, rule gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	return s.Store.Charge(ctx, key, rule, n, now.Add(s.by))
}
