package federation_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// regionRedis starts one real redis-server per region, on demand: each
// region's escrow (L2) and regional budget live on its own.
type regionRedis struct {
	t       *testing.T
	servers map[int]*testenv.Redis
}

func (rr *regionRedis) server(region int) *testenv.Redis {
	if rr.servers[region] == nil {
		rr.servers[region] = testenv.StartRedis(rr.t)
	}
	return rr.servers[region]
}

// realRegions gives each region its own real Redis as L2, on the callers'
// (fake) clock, with coord as L3. Their round trips are bounded by their
// callers' deadlines and StoreDeadline: a loaded machine does not time them
// out.
func realRegions(t *testing.T, coord func(t *testing.T) federation.Coordinator) backends {
	rr := &regionRedis{t: t, servers: map[int]*testenv.Redis{}}
	return backends{
		coord: coord,
		escrow: func(t *testing.T, region int) federation.Escrow {
			e, err := redisfed.NewEscrow(rr.server(region).Client(), redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
			if err != nil {
				t.Fatal(err)
			}
			return e
		},
		fallback: func(t *testing.T, region int) gale.Store {
			s, err := redisstore.New(rr.server(region).Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
}

// redisCoordinator is one more real Redis as L3, its round trips bounded
// by StoreDeadline.
func redisCoordinator(t *testing.T) func(t *testing.T) federation.Coordinator {
	srv := testenv.StartRedis(t)
	return func(t *testing.T) federation.Coordinator {
		c, err := redisfed.NewCoordinator(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// TestFederatedBoundRedis: the K-region bound with each region's own
// redis-server as L2 and one more as L3.
func TestFederatedBoundRedis(t *testing.T) {
	runFederatedBound(t, realRegions(t, redisCoordinator(t)))
}

// TestFederatedBoundPostgres: the K-region bound with each region's own
// redis-server as L2 and a real PostgreSQL as L3.
func TestFederatedBoundPostgres(t *testing.T) {
	pg := testenv.StartPostgres(t)
	pool, err := pgxpool.New(context.Background(), pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	coord, err := pgcoord.New(context.Background(), pool, pgcoord.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runFederatedBound(t, realRegions(t, func(*testing.T) federation.Coordinator { return coord }))
}
