package boundcheck

import (
	"context"
	"flag"
	"fmt"
	"testing"

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
