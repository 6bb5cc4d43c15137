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
	seeds     = flag.Uint64("seeds", 1000, "schedules to check on the memory store (make check-bounds SEEDS=…)")
	firstSeed = flag.Uint64("first-seed", 1, "the first seed")
	redisRuns = flag.Uint64("redis-seeds", 50, "schedules to check on a real Redis")
	survey    = flag.Bool("survey", false, "go on past failures: report, for each row and kind broken, the first seed and how many broke it")
)

// memory is the memory store: a fresh one per run, restarted as a new one.
var memory = Backend{
	New:     func() gale.Store { return memstore.New() },
	Restart: func(context.Context, gale.Store) (gale.Store, error) { return memstore.New(), nil },
	Local:   true,
}

// startRedis starts a real Redis, shared by the runs (their domains name
// their keys apart, and they run one at a time): a restart empties it
// (FLUSHALL), and the store counts it as its restart watch counts a new
// server.
func startRedis(t *testing.T) Backend {
	srv := testenv.StartRedis(t)
	client := srv.Client()
	store, err := redisstore.New(client, redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	return Backend{
		New: func() gale.Store { return store },
		Restart: func(ctx context.Context, s gale.Store) (gale.Store, error) {
			return s, client.FlushAll(ctx).Err()
		},
	}
}

// TestBoundsHold plays seeded schedules on the memory store (each on a
// store of its own) and on a real Redis, and judges every window by its
// row of the bounds table. A failure is shrunk and printed, to replay
// with -first-seed and -seeds=1.
func TestBoundsHold(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, from, n uint64, b Backend) {
		checkSeeds(t, from, n, func(seed uint64) (played, error) {
			sc := Generate(seed)
			domain := fmt.Sprintf("bc%d", seed)
			r, err := Run(ctx, sc, b, domain)
			if err != nil {
				return played{}, fmt.Errorf("%w\n%v", err, sc)
			}
			return played{steps: len(sc.Steps), violations: r.Violations, shrink: func() string {
				k := 0
				small, err := Shrink(ctx, r, func(c Schedule) (Result, error) {
					k++
					return Run(ctx, c, b, fmt.Sprintf("%s-s%d", domain, k))
				})
				if err != nil {
					t.Logf("shrinking stopped: %v", err)
				}
				return fmt.Sprintf("(%d steps, shrunk to %d in %d runs):\n%s", len(sc.Steps), len(small.Schedule.Steps), k, Describe(small))
			}}, nil
		})
	}
	t.Run("memory", func(t *testing.T) {
		check(t, *firstSeed, *seeds, memory)
	})
	t.Run("redis", func(t *testing.T) {
		if testing.Short() || *redisRuns == 0 {
			t.Skip("starts redis-server")
		}
		check(t, *firstSeed, *redisRuns, startRedis(t))
	})
}
