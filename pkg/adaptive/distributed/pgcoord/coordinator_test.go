package pgcoord_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/distributedtest"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
)

// t0 is the tests' timeline origin.
var t0 = time.Unix(1_700_000_000, 0)

var hour = distributed.Config{LeaseTTL: time.Hour}

// newPool returns a pool of 8 connections on pg's database, closed when tb
// ends; configure, when not nil, adjusts its configuration first.
func newPool(tb testing.TB, pg *testenv.Postgres, configure func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	return pg.Pool(tb, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 8 // several connections, so concurrent heartbeats really race
		if configure != nil {
			configure(cfg)
		}
	})
}

func newCoordinator(tb testing.TB, pool *pgxpool.Pool, opts pgcoord.Options) *pgcoord.Coordinator {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgcoord.New(ctx, pool, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// beat sends one report and fails tb on an error.
func beat(tb testing.TB, c distributed.Coordinator, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) distributed.Grant {
	tb.Helper()
	g, err := c.Heartbeat(context.Background(), gate, rep, cfg, now)
	if err != nil {
		tb.Fatalf("gate %q, %+v: %v", gate, rep, err)
	}
	return g
}

// TestConformance runs the Coordinator contract, then what this package
// adds to it (any bytes in names, full-width counters, serialized first
// beats across processes, table names, round trips), on one server.
func TestConformance(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	pool := newPool(t, pg, nil)
	c := newCoordinator(t, pool, pgcoord.Options{})
	distributedtest.RunCoordinator(t, func(*testing.T) distributed.Coordinator { return c })
	t.Run("NamesHoldAnyBytes", func(t *testing.T) { testNames(t, c) })
	t.Run("CountersUseAll64Bits", func(t *testing.T) { testWideCounters(t, c) })
	t.Run("FirstBeatsOfANewGateAreSerialized", func(t *testing.T) {
		// Two pools: two processes sharing the tables, the other's
		// sessions defaulting to REPEATABLE READ, which a heartbeat must
		// not inherit.
		other := newCoordinator(t, newPool(t, pg, func(cfg *pgxpool.Config) {
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
		}), pgcoord.Options{})
		testFirstBeats(t, []*pgcoord.Coordinator{c, other})
	})
	t.Run("TableNames", func(t *testing.T) { testTableNames(t, pool) })
	t.Run("RoundTrips", func(t *testing.T) { testRoundTrips(t, pg) })
}

// checked is the coordinator under a differential test: after each of its
// heartbeats, the records it stored must be the reference's.
type checked struct {
	t   *testing.T
	c   *pgcoord.Coordinator
	ref *distributed.Memory // beaten first by Differential
}

func (k checked) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	g, err := k.c.Heartbeat(ctx, gate, rep, cfg, now)
	got, rerr := k.c.Records(ctx, gate)
	if rerr != nil {
		k.t.Fatal(rerr)
	}
	if want := k.ref.Records(gate); !slices.Equal(got, want) {
		k.t.Fatalf("after %+v at %v, %+v:\n stored %+v\n want   %+v", rep, now, cfg, got, want)
	}
	return g, err
}

// TestDifferential holds the coordinator to distributed.Memory's grants
// and records, step for step, on random schedules.
func TestDifferential(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	c := newCoordinator(t, newPool(t, pg, nil), pgcoord.Options{Table: "differential"})
	for seed := range uint64(20) {
		ref := distributed.NewMemory()
		distributedtest.Differential(t, ref, checked{t, c, ref}, seed, 300)
	}
}

// TestServerTime: with ServerTime, the database's clock decides, whatever
// now the caller passes: leases start at it and end on it.
func TestServerTime(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	c := newCoordinator(t, newPool(t, pg, nil), pgcoord.Options{Table: "server_time", ServerTime: true})
	far := t0.Add(365 * 24 * time.Hour) // a caller's clock a year off

	t.Run("LeasesStartNow", func(t *testing.T) {
		g := beat(t, c, t.Name(), distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 10}, hour, far)
		if d := time.Since(time.UnixMicro(g.Now)); d < -time.Second || d > time.Second {
			t.Fatalf("Grant.Now %v is %v from this host's clock, want the database's (within a second)", time.UnixMicro(g.Now), d)
		}
		if g.ExpiresAt-g.Now != hour.LeaseTTL.Microseconds() {
			t.Fatalf("lease %v (ExpiresAt − Now), want %v", time.Duration(g.ExpiresAt-g.Now)*time.Microsecond, hour.LeaseTTL)
		}
		// b's caller says a's lease ended long ago; the database, not.
		g = beat(t, c, t.Name(), distributed.Report{Node: "b", Instance: "i", Seq: 1, Local: 10}, hour, far.Add(10*365*24*time.Hour))
		if g.Live != 2 || g.Share != 0 {
			t.Fatalf("b beside a live a: %+v, want 2 live and share 0 (a holds 10)", g)
		}
	})
	t.Run("LeasesEndOnTheDatabaseClock", func(t *testing.T) {
		// A 1 µs lease has ended on the database's clock by the next
		// heartbeat, although the callers pass one instant.
		short := distributed.Config{LeaseTTL: time.Microsecond}
		beat(t, c, t.Name(), distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 10}, short, t0)
		g := beat(t, c, t.Name(), distributed.Report{Node: "b", Instance: "i", Seq: 1, Local: 10}, short, t0)
		if g.Live != 1 || g.Share != 10 {
			t.Fatalf("b after a's 1 µs lease: %+v, want b alone with 10", g)
		}
		if recs, err := c.Records(context.Background(), t.Name()); err != nil || len(recs) != 1 || recs[0].Node != "b" {
			t.Fatalf("records %+v, %v; want b's alone (a's evicted)", recs, err)
		}
	})
	t.Run("ConcurrentBeatsKeepTheCap", func(t *testing.T) { testFirstBeats(t, []*pgcoord.Coordinator{c}) })
}

// TestRestart: after a restart, the heartbeat that finds its pooled
// connection dead is retried on a new one; a server that is down fails
// heartbeats with an error within the caller's deadline; the committed
// records survive both.
func TestRestart(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	pool := newPool(t, pg, nil)
	c := newCoordinator(t, pool, pgcoord.Options{})
	rep := distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 10}
	next := func() { rep.Seq++; rep.AppliedGen++ }
	if g := beat(t, c, t.Name(), rep, hour, t0); g.Gen != 1 {
		t.Fatalf("beat before the restart: %+v", g)
	}

	pg.Restart()
	next()
	if g := beat(t, c, t.Name(), rep, hour, t0); g.Gen != 2 {
		t.Fatalf("beat after the restart: %+v, want gen 2 (the record of gen 1 survived)", g)
	}

	pg.Kill()
	// The pool's connections are dropped: testenv's Kill reaches the
	// postmaster, not the backends (each its own process group), and one
	// may answer a query or two before it notices the postmaster's death.
	pool.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	next()
	if g, err := c.Heartbeat(ctx, t.Name(), rep, hour, t0); err == nil {
		t.Fatalf("heartbeat on a killed server: %+v, want an error", g)
	} else if !strings.HasPrefix(err.Error(), "pgcoord: heartbeat ") {
		t.Fatalf("error %q lacks its context", err)
	}
	if d := time.Since(start); d > 6*time.Second {
		t.Fatalf("the failed heartbeat took %v, beyond its 5 s deadline", d)
	}

	pg.Restart()
	if g := beat(t, c, t.Name(), rep, hour, t0); g.Gen != 3 {
		t.Fatalf("beat once the server is back: %+v, want gen 3", g)
	}
}

// testNames: gate, node and instance names hold any bytes, as Go strings
// do; each gate has its own records, each node its own record.
func testNames(t *testing.T, c *pgcoord.Coordinator) {
	names := []string{"", "a", "a\x00", "A", "\xff\xfe", "ключ", strings.Repeat("k", 500), `'; DROP TABLE x; --`, `\x41`}
	for i, name := range names {
		gate := t.Name() + "/" + name
		for j, node := range names[1:] { // a node name is not empty
			g := beat(t, c, gate, distributed.Report{Node: node, Instance: name, Seq: 1, Local: 100 + i}, hour, t0)
			if g.Live != j+1 || g.Global != 100+i {
				t.Fatalf("gate %d, node %d: %+v, want %d live of ceiling %d", i, j, g, j+1, 100+i)
			}
		}
	}
	for i, name := range names {
		recs, err := c.Records(context.Background(), t.Name()+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(names[1:])
		slices.Sort(want)
		if len(recs) != len(want) {
			t.Fatalf("gate %d: %d records, want %d", i, len(recs), len(want))
		}
		for j, r := range recs {
			if r.Node != want[j] || r.Instance != name || r.Local != 100+i {
				t.Fatalf("gate %d record %d: %+v, want node %q of instance %q, local %d", i, j, r, want[j], name, 100+i)
			}
		}
	}
	// A name too long for the primary key's index is an error; the
	// connection it failed on serves the next heartbeat.
	raw := make([]byte, 10000) // random: incompressible
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	long := string(raw)
	if _, err := c.Heartbeat(context.Background(), long, distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 1}, hour, t0); err == nil ||
		!strings.HasPrefix(err.Error(), "pgcoord: heartbeat ") {
		t.Fatalf("a 10 kB gate name: %v, want a pgcoord error", err)
	}
	if g := beat(t, c, t.Name(), distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 1}, hour, t0); g.Gen != 1 {
		t.Fatalf("heartbeat after a failed one: %+v", g)
	}
}

// testWideCounters: seq and generations are uint64 end to end, although
// stored in signed columns.
func testWideCounters(t *testing.T, c *pgcoord.Coordinator) {
	seq := uint64(math.MaxUint64 - 1)
	rep := distributed.Report{Node: "a", Instance: "i", Seq: seq, Local: 10, AppliedGen: distributed.MaxGen}
	if g := beat(t, c, t.Name(), rep, hour, t0); g.Gen != distributed.MaxGen+1 || g.Status != distributed.Granted {
		t.Fatalf("first beat at seq 2⁶⁴−2, applied 2⁵²: %+v, want granted at gen 2⁵²+1", g)
	}
	rep.Seq = 1 << 63
	if g := beat(t, c, t.Name(), rep, hour, t0); g.Status != distributed.Stale {
		t.Fatalf("seq 2⁶³ after 2⁶⁴−2: %+v, want stale", g)
	}
	rep.Seq = math.MaxUint64
	if g := beat(t, c, t.Name(), rep, hour, t0); g.Status != distributed.Granted || g.Gen != distributed.MaxGen+2 {
		t.Fatalf("seq 2⁶⁴−1: %+v, want granted at gen 2⁵²+2", g)
	}
	recs, err := c.Records(context.Background(), t.Name())
	if err != nil || len(recs) != 1 || recs[0].Seq != math.MaxUint64 || recs[0].AppliedGen != distributed.MaxGen || recs[0].Gen != distributed.MaxGen+2 {
		t.Fatalf("records %+v, %v; want seq 2⁶⁴−1, applied gen 2⁵², gen 2⁵²+2", recs, err)
	}
}

// testFirstBeats starts, on each of 20 new gates, 8 nodes at once through
// the coordinators in turn, each beating 5 times within its share: were
// the first beats of a gate not serialized, each node would find the gate
// empty and take the whole ceiling. Σ share ≤ L_global after every beat,
// and in the records left.
func testFirstBeats(t *testing.T, cs []*pgcoord.Coordinator) {
	const nodes, limit = 8, 40
	for round := range 20 {
		gate := fmt.Sprintf("%s/%d", t.Name(), round)
		var (
			mu     sync.Mutex
			shares = map[string]int{}
			wg     sync.WaitGroup
		)
		start := make(chan struct{})
		for n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				node, c := fmt.Sprintf("n%d", n), cs[n%len(cs)]
				<-start
				var applied uint64
				var share int
				for seq := uint64(1); seq <= 5; seq++ {
					g, err := c.Heartbeat(context.Background(), gate, distributed.Report{Node: node, Instance: "i", Seq: seq,
						Local: limit, Inflight: share, AppliedGen: applied}, distributed.Config{LeaseTTL: time.Hour, Handoff: true}, t0)
					if err != nil {
						t.Errorf("%s: %v", node, err)
						return
					}
					applied, share = g.Gen, g.Share
					mu.Lock()
					shares[node] = share
					sum := 0
					for _, s := range shares {
						sum += s
					}
					mu.Unlock()
					if sum > limit {
						t.Errorf("round %d: Σ share %d > %d after %s's beat", round, sum, limit, node)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		recs, err := cs[0].Records(context.Background(), gate)
		if err != nil {
			t.Fatal(err)
		}
		sum := 0
		for _, r := range recs {
			sum += r.Share
		}
		if len(recs) != nodes || sum > limit {
			t.Fatalf("round %d: %d records with Σ share %d, want %d with at most %d", round, len(recs), sum, nodes, limit)
		}
	}
}

// testTableNames: New refuses a table prefix that is not a plain lowercase
// identifier, and accepts one twice, a reserved word, and the longest.
func testTableNames(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	for _, table := range []string{"Upper", "1st", "a-b", "a.b", `a"b`, strings.Repeat("x", pgcoord.MaxTable+1)} {
		if _, err := pgcoord.New(ctx, pool, pgcoord.Options{Table: table}); !errors.Is(err, pgcoord.ErrTable) {
			t.Errorf("New with table %q: %v, want ErrTable", table, err)
		}
	}
	if _, err := pgcoord.New(ctx, nil, pgcoord.Options{}); err == nil {
		t.Error("New with a nil pool: no error")
	}
	for _, table := range []string{"select", "select", strings.Repeat("x", pgcoord.MaxTable)} {
		c := newCoordinator(t, pool, pgcoord.Options{Table: table})
		if g, err := c.Heartbeat(ctx, t.Name(), distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 3}, hour, t0); err != nil || g.Share != 3 {
			t.Fatalf("table %q: %+v, %v", table, g, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pgcoord.New(cancelled, pool, pgcoord.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("New with a cancelled context: %v, want context.Canceled", err)
	}
}
