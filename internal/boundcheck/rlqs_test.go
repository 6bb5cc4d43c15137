package boundcheck

import (
	"context"
	"flag"
	"fmt"
	"strings"
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
		began, last := time.Now(), time.Now()
		steps := 0
		found, first := map[string]int{}, map[string]string{}
		defer func() {
			for key, n := range found {
				i := strings.LastIndex(key, "/")
				t.Errorf("%s (safety %s) broken in %d schedules; the first: %s", key[:i], key[i+1:], n, first[key])
			}
		}()
		for seed := from; seed < from+n; seed++ {
			sc := GenerateRLQS(seed)
			steps += len(sc.Steps)
			domain := fmt.Sprintf("bcq%d", seed)
			r, err := RunRLQS(ctx, sc, newStore, domain)
			if err != nil {
				t.Fatalf("seed %d: %v\n%v", seed, err, sc)
			}
			if r.Failed() && *survey {
				seen := map[string]bool{}
				for _, v := range r.Violations {
					key := fmt.Sprintf("%s/%v", v.Row, v.Safety)
					if seen[key] {
						continue
					}
					seen[key] = true
					if found[key] == 0 {
						first[key] = fmt.Sprintf("seed %d: %v", seed, v.Violation)
					}
					found[key]++
				}
				continue
			}
			if r.Failed() {
				k := 0
				small, err := ShrinkRLQS(ctx, r, func(c RLQSSchedule) (RLQSResult, error) {
					k++
					return RunRLQS(ctx, c, newStore, fmt.Sprintf("%s-s%d", domain, k))
				})
				if err != nil {
					t.Logf("shrinking stopped: %v", err)
				}
				t.Fatalf("seed %d broke the bounds table (%d steps, shrunk to %d in %d runs):\n%s",
					seed, len(sc.Steps), len(small.Schedule.Steps), k, DescribeRLQS(small))
			}
			if time.Since(last) > 30*time.Second {
				last = time.Now()
				t.Logf("%d of %d schedules (seeds %d..%d), %d steps, in %v", seed-from+1, n, from, seed, steps, time.Since(began).Round(time.Second))
			}
		}
		t.Logf("%d schedules clean (seeds %d..%d), %d steps, in %v", n, from, from+n-1, steps, time.Since(began).Round(time.Millisecond))
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
