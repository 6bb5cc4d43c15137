package boundcheck

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

var (
	rlqsSeeds      = flag.Uint64("rlqs-seeds", 40, "RLQS schedules to check on the memory store (default: -seeds when that is given)")
	rlqsRedisSeeds = flag.Uint64("rlqs-redis-seeds", 20, "RLQS schedules to check on a real Redis (default: -redis-seeds when that is given)")
)

// rlqsBudget is the RLQS checker's budget: its own flag when given, else
// the engine checker's when given (make check-bounds SEEDS=…), else its
// own default, which keeps make test's share to a few seconds.
func rlqsBudget(own *uint64, ownName, shared string) uint64 {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set[ownName] && set[shared] {
		return flag.Lookup(shared).Value.(flag.Getter).Get().(uint64)
	}
	return *own
}

// TestRLQSBoundsHold plays seeded RLQS schedules (GenerateRLQS) on the
// memory store (each on a store of its own) and on a real Redis, and
// judges every window by RLQSRows. A failure is shrunk and printed, to
// replay with -first-seed and -rlqs-seeds=1, and as a literal to keep in
// rlqs_regress_test.go.
func TestRLQSBoundsHold(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, from, n uint64, newStore func() gale.Store) {
		checkSeeds(t, from, n, func(seed uint64) (played, error) {
			sc := GenerateRLQS(seed)
			domain := fmt.Sprintf("bcq%d", seed)
			r, err := RunRLQS(ctx, sc, newStore, domain)
			if err != nil {
				return played{}, fmt.Errorf("%w\n%v", err, sc)
			}
			p := played{steps: len(sc.Steps), shrink: func() string {
				k := 0
				small, err := ShrinkRLQS(ctx, r, func(c RLQSSchedule) (RLQSResult, error) {
					k++
					return RunRLQS(ctx, c, newStore, fmt.Sprintf("%s-s%d", domain, k))
				})
				if err != nil {
					t.Logf("shrinking stopped: %v", err)
				}
				return fmt.Sprintf("(%d steps, shrunk to %d in %d runs):\n%s", len(sc.Steps), len(small.Schedule.Steps), k, DescribeRLQS(small))
			}}
			for _, v := range r.Violations {
				p.violations = append(p.violations, v.Violation)
			}
			return p, nil
		})
	}
	t.Run("memory", func(t *testing.T) {
		check(t, *firstSeed, rlqsBudget(rlqsSeeds, "rlqs-seeds", "seeds"), func() gale.Store { return memstore.New() })
	})
	t.Run("redis", func(t *testing.T) {
		n := rlqsBudget(rlqsRedisSeeds, "rlqs-redis-seeds", "redis-seeds")
		if testing.Short() || n == 0 {
			t.Skip("starts redis-server")
		}
		srv := testenv.StartRedis(t)
		store, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		check(t, *firstSeed, n, func() gale.Store { return store })
	})
}

// poissonRequests are Envoy e's requests of bucket 0, Poisson at rate a
// second from from until until.
func poissonRequests(rng *rand.Rand, e int, rate float64, from, until time.Duration) []RLQSStep {
	var out []RLQSStep
	for at := from; at < until; at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) {
		out = append(out, RLQSStep{At: at, Kind: RLQSRequest, Envoy: e})
	}
	return out
}

// allowAllFleet is issue 41's ALLOW_ALL shape: two sidecars, eight Envoys
// (four on each) under Envoy's default no_assignment_behavior, Poisson
// arrivals whose sum is three times L = 100 per 10 s, one Envoy hot at
// five times the others, for six windows, some starting at a boundary.
func allowAllFleet(seed uint64) RLQSSchedule {
	rng := rand.New(rand.NewPCG(seed, 41))
	sc := RLQSSchedule{Seed: seed, Policy: RLQSPolicy{Limit: 100, Window: 10 * time.Second, Name: "l0"}, Servers: 2,
		Envoys: []int{0, 0, 0, 0, 1, 1, 1, 1}, AllowAll: true, Steady: true, Length: 60 * time.Second}
	total := 3 * float64(sc.Policy.Limit) / sc.Policy.Window.Seconds()
	weights := []float64{5, 1, 1, 1, 1, 1, 1, 1}
	for e, w := range weights {
		rate := total * w / 12
		start := time.Duration(rng.Int64N(int64(sc.Policy.Window)))
		if e%2 == 0 {
			start = 0 // together, at a boundary
		}
		sc.Steps = append(sc.Steps, poissonRequests(rng, e, rate, start, sc.Length)...)
	}
	slices.SortStableFunc(sc.Steps, func(a, b RLQSStep) int { return cmp.Compare(a.At, b.At) })
	return sc
}

// TestRLQSAllowAllAdmitsAtMostLPlusEnvoys (issue 41): under Envoy's
// default no_assignment_behavior, ALLOW_ALL, and 3L demand, no window
// admits more than L + one request per Envoy (its bucket's first, decided
// before any answer), on a real Redis. Before the sidecars kept a DENY_ALL
// in force wherever an Envoy held no assignment, an assignment expiring
// before its window's end (by the Guard and the TTL's whole seconds) left
// its Envoy unmetered until the next window's assignment: on the main
// before the seal, seeds 1–3 admitted 105–131 per window of L = 100.
func TestRLQSAllowAllAdmitsAtMostLPlusEnvoys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	store := rlqsRedisStore(t)
	for seed := uint64(1); seed <= 3; seed++ {
		sc := allowAllFleet(seed)
		told, err := PlayRLQS(context.Background(), sc, store, fmt.Sprintf("bcallow%d", seed))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range JudgeRLQS(sc, told) {
			t.Errorf("seed %d: %v", seed, v.Violation)
		}
		perWindow := make([]int64, sc.Length/sc.Policy.Window)
		for i, st := range sc.Steps {
			if told.Steps[i].Admitted {
				perWindow[st.At/sc.Policy.Window]++
			}
		}
		most := sc.Policy.Limit + int64(len(sc.Envoys))
		for w, n := range perWindow {
			if n > most {
				t.Errorf("seed %d, window %d: admitted %d > L + Envoys = %d", seed, w, n, most)
			}
		}
		assigned := make([]int64, len(perWindow))
		for _, a := range told.Actions {
			if a.Other == "" && a.At < sc.Length {
				assigned[a.At/sc.Policy.Window] += a.Tokens
			}
		}
		t.Logf("seed %d: admitted per window %v, assigned %v (L %d, %d Envoys, demand 3L)", seed, perWindow, assigned, sc.Policy.Limit, len(sc.Envoys))
	}
}

// TestRLQSLiarLeavesHonestEnvoysTheirShare (issue 41, item 4): two real
// sidecars over a real Redis, eight Envoys under DENY_ALL with Envoy's
// timer and Poisson arrivals, each honest one asking 0.1 L per 10 s
// window; the first Envoy lies, reporting 2^40 requests (the most a
// report may carry), nearly all denied, every 5 s. The split is max-min by demand among Envoys and, through the
// demand ledger, among the sidecars, so the liar takes only what the
// honest Envoys leave: each honest Envoy is assigned, per steady window,
// at least 0.8 of its max-min fair share (its demand over the TTL: under
// the fair level), summed over the run's steady windows (a window's own
// figure follows its Poisson rate estimate). Every window is judged by
// the bounds table too.
func TestRLQSLiarLeavesHonestEnvoysTheirShare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	store := rlqsRedisStore(t)
	const limit, windows = 400, 6
	for seed := uint64(1); seed <= 2; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x11a2))
		sc := RLQSSchedule{Seed: seed, Policy: RLQSPolicy{Limit: limit, Window: 10 * time.Second, Name: "l0"}, Servers: 2,
			Envoys: []int{0, 0, 0, 0, 1, 1, 1, 1}, Liar: 1, Length: windows * 10 * time.Second}
		rate := 0.1 * limit / sc.Policy.Window.Seconds()
		for e := range sc.Envoys {
			sc.Steps = append(sc.Steps, poissonRequests(rng, e, rate, time.Duration(rng.Int64N(int64(time.Second))), sc.Length)...)
		}
		slices.SortStableFunc(sc.Steps, func(a, b RLQSStep) int { return cmp.Compare(a.At, b.At) })
		told, err := PlayRLQS(context.Background(), sc, store, fmt.Sprintf("bcliar%d", seed))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range JudgeRLQS(sc, told) {
			t.Errorf("seed %d: %v", seed, v.Violation)
		}
		assigned := make([][]int64, len(sc.Envoys))
		for e := range assigned {
			assigned[e] = make([]int64, windows)
		}
		for _, a := range told.Actions {
			if a.Other == "" && a.At < sc.Length {
				assigned[a.Envoy][a.At/sc.Policy.Window] += a.Tokens
			}
		}
		// The fair share of an honest Envoy: its demand over the 9 s TTL
		// (the fair level among eight, L/8 = 50, is above it).
		fair := rate * 9
		for e := 1; e < len(sc.Envoys); e++ {
			var got int64
			for w := 1; w < windows; w++ {
				got += assigned[e][w]
			}
			if mean := float64(got) / (windows - 1); mean < 0.8*fair {
				t.Errorf("seed %d: honest Envoy %d assigned %.1f per steady window (%v), want ≥ 0.8 of its fair share %.0f; the liar %v", seed, e, mean, assigned[e], fair, assigned[0])
			}
		}
		t.Logf("seed %d: assigned per window, the liar %v, honest %v", seed, assigned[0], assigned[1:])
	}
}

// rlqsRedisStore is a store over a fresh redis-server whose calls wait
// testenv.StoreDeadline: the RLQS runs judge what was told, not latency.
func rlqsRedisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	store, err := redisstore.New(testenv.StartRedis(t).Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	return store
}
