package pgcoord_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/pgtx"
	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

var perMinute = gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}

// newPool returns a pool on pg's database, closed when tb ends; configure,
// when not nil, adjusts its configuration first.
func newPool(tb testing.TB, pg *testenv.Postgres, configure func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	return pg.Pool(tb, func(cfg *pgxpool.Config) {
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

// TestConformance runs the federation contract, then what this package
// adds to it (any bytes in keys, table names, round trips), on one server.
func TestConformance(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	pool := newPool(t, pg, nil)
	c := newCoordinator(t, pool, pgcoord.Options{})
	federationtest.RunCoordinator(t, func(*testing.T) federation.Coordinator { return c })
	t.Run("KeysHoldAnyBytes", func(t *testing.T) { testKeys(t, c) })
	t.Run("StoredKeys", func(t *testing.T) { testStoredKeys(t, c, pool, pgcoord.DefaultTable) })
	t.Run("Refusals", func(t *testing.T) { testRefusals(t, pool) })
	t.Run("TableNames", func(t *testing.T) { testTableNames(t, pool) })
	t.Run("RoundTrips", func(t *testing.T) { testRoundTrips(t, pg) })
}

// TestDifferential holds the coordinator to the MemoryCoordinator's
// answers, step for step; one run cleans up after every operation, which
// must change no answer.
func TestDifferential(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	pool := newPool(t, pg, nil)
	cases := []struct {
		name string
		opts pgcoord.Options
	}{
		{"Default", pgcoord.Options{Table: "diff_default"}},
		{"CleanupEveryOperation", pgcoord.Options{Table: "diff_cleanup", CleanupEvery: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoordinator(t, pool, tc.opts)
			for seed := range uint64(3) {
				federationtest.DifferentialCoordinator(t, seed, 1500, federation.NewMemoryCoordinator(nil), c)
			}
		})
	}
}

// TestServerTime: with ServerTime, the database's clock decides, whatever
// now the caller passes; and on it, concurrent leases across many short
// windows, with a cleanup after every operation, never grant a window more
// than the limit. The first is judged against the database's clock read
// around the lease; the second runs on a database clock the test steps
// (fakeDatabaseClock), not on the wall clock's windows passing.
func TestServerTime(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	pool := newPool(t, pg, nil)
	t.Run("TheDatabaseClockDecides", func(t *testing.T) {
		testDatabaseClock(t, pool, newCoordinator(t, pool, pgcoord.Options{ServerTime: true}))
	})
	t.Run("ConcurrentWindowsWithCleanup", func(t *testing.T) {
		t0 := storetest.Timeline()
		stepped := fakeDatabaseClock(t, pg, pool, t0, time.Millisecond)
		testConcurrentWindows(t, newCoordinator(t, stepped, pgcoord.Options{Table: "windows", ServerTime: true, CleanupEvery: 1}), t0)
	})
}

// testDatabaseClock: Grant.Now is the database's clock, read around the
// lease; a run the window's end crossed (it ended between the calls on the
// database's clock) cannot be judged, and is made again on another key.
func testDatabaseClock(t *testing.T, pool *pgxpool.Pool, c *pgcoord.Coordinator) {
	ctx := context.Background()
	far := storetest.Timeline().Add(365 * 24 * time.Hour) // a caller's clock a year off

	for attempt := 0; ; attempt++ {
		key := fmt.Sprintf("%s/%d", t.Name(), attempt)
		before := databaseClock(t, pool)
		g, err := c.Lease(ctx, key, perMinute, 4, 4, far)
		after := databaseClock(t, pool)
		if err != nil {
			t.Fatal(err)
		}
		if g.Granted != 4 {
			t.Fatalf("granted %d, want 4", g.Granted)
		}
		if g.Now.Before(before) || g.Now.After(after) {
			t.Fatalf("Grant.Now %v is not the database's clock (read %v before the lease, %v after)", g.Now, before, after)
		}
		if live := g.WindowEnd.Sub(g.Now); live <= 0 || live > perMinute.Period {
			t.Fatalf("units live %v (WindowEnd − Now), want within (0, %v]", live, perMinute.Period)
		}

		// The caller's now says the window ended long ago; the database's, not.
		rec := federation.Reconcile{Leftover: 3, WindowEnd: g.WindowEnd, Token: "eu", Now: far.Add(time.Hour)}
		applied, aerr := c.Reconcile(ctx, key, perMinute, rec)
		duplicate, derr := c.Reconcile(ctx, key, perMinute, rec)
		rec.WindowEnd, rec.Now = g.WindowEnd.Add(-perMinute.Period), time.Time{}
		expired, eerr := c.Reconcile(ctx, key, perMinute, rec)
		if last := databaseClock(t, pool); !last.Before(g.WindowEnd) && attempt == 0 {
			t.Logf("the database's minute ended during the run (%v): again", last)
			continue
		}
		if aerr != nil || applied != federation.Applied {
			t.Fatalf("reconcile of the live window: %v, %v; want applied", applied, aerr)
		}
		if derr != nil || duplicate != federation.Duplicate {
			t.Fatalf("its retry: %v, %v; want duplicate", duplicate, derr)
		}
		if eerr != nil || expired != federation.Expired {
			t.Fatalf("reconcile of the window before: %v, %v; want expired", expired, eerr)
		}
		return
	}
}

// databaseClock is the database's clock, as ServerTime reads it.
func databaseClock(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var us int64
	if err := pool.QueryRow(context.Background(), "SELECT "+pgtx.ClockMicros).Scan(&us); err != nil {
		t.Fatal(err)
	}
	return time.UnixMicro(us)
}

// fakeDatabaseClock returns a pool on pg whose sessions read a database
// clock the test steps: clock_timestamp(), which ServerTime reads, resolves
// to one in the schema fake_clock, searched before pg_catalog, which reads
// t0 plus step more at every call — a sequence's, so every session's reads
// fall in one order, as the real clock's do. admin, a pool of pg's, makes
// the schema, once per server.
func fakeDatabaseClock(t *testing.T, pg *testenv.Postgres, admin *pgxpool.Pool, t0 time.Time, step time.Duration) *pgxpool.Pool {
	t.Helper()
	if _, err := admin.Exec(context.Background(), fmt.Sprintf(`CREATE SCHEMA fake_clock;
CREATE SEQUENCE fake_clock.ticks;
CREATE FUNCTION fake_clock.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE
	AS $$ SELECT timestamptz 'epoch' + (%d + nextval('fake_clock.ticks') * %d) * interval '1 microsecond' $$`,
		t0.UnixMicro(), step.Microseconds())); err != nil {
		t.Fatal(err)
	}
	return newPool(t, pg, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["search_path"] = "public, fake_clock, pg_catalog"
	})
}

// testConcurrentWindows leases concurrently on c, whose database clock
// steps a millisecond from t0 at every read.
func testConcurrentWindows(t *testing.T, c *pgcoord.Coordinator, t0 time.Time) {
	rules := []gale.Rule{
		{Algorithm: gale.FixedWindow, Limit: 10, Period: 40 * time.Millisecond},
		{Algorithm: gale.SlidingWindow, Limit: 10, Period: 40 * time.Millisecond},
	}
	type window struct {
		rule int
		end  time.Time
	}
	var (
		mu      sync.Mutex
		granted = map[window]int64{}
		wg      sync.WaitGroup
	)
	// Each lease reads the database's clock once, a step of 1 ms: 320
	// leases take it across 8 windows of each rule, with 20 leases of up
	// to 3 units asking each window's 10.
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ri := g % len(rules)
			key := fmt.Sprintf("%s/%d", t.Name(), ri)
			for range 40 {
				gr, err := c.Lease(context.Background(), key, rules[ri], 1, 3, time.Time{})
				if err != nil {
					t.Error(err)
					return
				}
				if gr.Granted > 0 {
					mu.Lock()
					granted[window{ri, gr.WindowEnd}] += gr.Granted
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(granted) < 2*len(rules) {
		t.Fatalf("leases spanned %d windows, want several per rule", len(granted))
	}
	full := 0
	for w, n := range granted {
		if n == rules[w.rule].Limit {
			full++
		}
		if !w.end.After(t0) || w.end.After(t0.Add(time.Second)) {
			t.Fatalf("a window ending %v: not on the database clock the test steps from %v", w.end, t0)
		}
		if n > rules[w.rule].Limit {
			t.Errorf("%v: the window ending %v granted %d, above the limit %d", rules[w.rule], w.end, n, rules[w.rule].Limit)
		}
	}
	t.Logf("%d windows, %d of them granted up to the limit", len(granted), full)
}

// TestRestart: a killed server fails leases with an error of its own, not
// by waiting out the caller's deadline; once it is back, leases succeed and
// the window's count survived.
func TestRestart(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	c := newCoordinator(t, newPool(t, pg, nil), pgcoord.Options{})
	t0 := storetest.Timeline()
	if g, err := c.Lease(context.Background(), t.Name(), perMinute, 7, 7, t0); err != nil || g.Granted != 7 {
		t.Fatalf("lease before the kill: %+v, %v", g, err)
	}

	pg.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.StoreDeadline)
	defer cancel()
	if g, err := c.Lease(ctx, t.Name(), perMinute, 1, 1, t0.Add(time.Second)); err == nil {
		t.Fatalf("lease on a killed server: %+v, want an error", g)
	} else if !strings.HasPrefix(err.Error(), "pgcoord: lease ") {
		t.Fatalf("error %q lacks its context", err)
	} else if errors.Is(err, federation.ErrRefused) {
		t.Fatalf("lease on a killed server: %v wraps ErrRefused: a dead server is an outage, not a refusal", err)
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("the failed lease waited out its caller's deadline (%v): a killed server refuses at once", err)
	}
	if err := c.Healthy(ctx); err == nil {
		t.Fatal("Healthy on a killed server: nil")
	}
	if _, err := c.Reconcile(ctx, t.Name(), perMinute, federation.Reconcile{Leftover: 1, WindowEnd: t0.Add(time.Minute), Token: "eu", Now: t0}); err == nil || errors.Is(err, federation.ErrRefused) {
		t.Fatalf("reconcile on a killed server: %v, want an error that is not ErrRefused", err)
	}

	pg.Restart()
	if err := c.Healthy(ctx); err != nil {
		t.Fatalf("Healthy after the restart: %v", err)
	}
	g, err := c.Lease(ctx, t.Name(), perMinute, 1, 10, t0.Add(2*time.Second))
	if err != nil {
		t.Fatalf("lease after the restart: %v", err)
	}
	if g.Granted != 3 {
		t.Fatalf("after the restart the window granted %d, want the 3 left of 10 (7 were granted before)", g.Granted)
	}
}

// testKeys: a key or token holds any bytes, as a Go string does; each key
// has its own budget.
func testKeys(t *testing.T, c *pgcoord.Coordinator) {
	ctx, t0 := context.Background(), storetest.Timeline()
	keys := []string{"", "a", "a\x00", "\xff\xfe", "ключ", strings.Repeat("k", 1000), `'; DROP TABLE x; --`}
	for i, key := range keys {
		if g, err := c.Lease(ctx, key, perMinute, 1, 10, t0); err != nil || g.Granted != 10 {
			t.Fatalf("key %d %q: %+v, %v; want the whole limit, 10", i, key, g, err)
		}
		rec := federation.Reconcile{Leftover: int64(i + 1), WindowEnd: t0.Add(time.Minute), Token: key[:min(len(key), 100)] + "\x00\xff", Now: t0}
		if got, err := c.Reconcile(ctx, key, perMinute, rec); err != nil || got != federation.Applied {
			t.Fatalf("key %d %q: reconcile %v, %v", i, key, got, err)
		}
	}
	for i, key := range keys {
		if g, err := c.Lease(ctx, key, perMinute, 1, 10, t0); err != nil || g.Granted != int64(i+1) {
			t.Fatalf("key %d %q: %+v, %v; want what its reconcile gave back, %d", i, key, g, err, i+1)
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
	// Twice on one prefix, and a reserved word: both fine.
	for _, table := range []string{"select", "select", strings.Repeat("x", pgcoord.MaxTable)} {
		c := newCoordinator(t, pool, pgcoord.Options{Table: table})
		if g, err := c.Lease(ctx, "k", perMinute, 1, 1, storetest.Timeline()); err != nil || g.Granted != 1 {
			t.Fatalf("table %q: %+v, %v", table, g, err)
		}
	}
	// A cancelled context fails New with the context's error.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := pgcoord.New(cancelled, pool, pgcoord.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("New with a cancelled context: %v, want context.Canceled", err)
	}
}

// roundTrips counts the round trips a pgx connection makes: one per batch
// and one per query (prepares are made once per connection, before the
// count starts).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// testRoundTrips: a lease, a denial and a reconcile take two round trips
// each, a reconcile of an ended window on the callers' clock none.
func testRoundTrips(t *testing.T, pg *testenv.Postgres) {
	tracer := &roundTrips{}
	pool := newPool(t, pg, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1 // one connection, whose statements the warm-up prepares
		cfg.ConnConfig.Tracer = tracer
	})
	for _, serverTime := range []bool{false, true} {
		c := newCoordinator(t, pool, pgcoord.Options{Table: "round_trips", ServerTime: serverTime, CleanupEvery: -1})
		ctx, t0 := context.Background(), storetest.Timeline()
		r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1000, Period: time.Hour}
		ops := func(key string) {
			g, err := c.Lease(ctx, key, r, 1, 1, t0)
			if err != nil || g.Granted != 1 {
				t.Fatalf("lease: %+v, %v", g, err)
			}
			rec := federation.Reconcile{Leftover: 0, WindowEnd: g.WindowEnd, Token: "eu", Now: t0}
			if got, err := c.Reconcile(ctx, key, r, rec); err != nil || got != federation.Applied {
				t.Fatalf("reconcile: %v, %v", got, err)
			}
			if _, err := c.Lease(ctx, key, r, 2000, 2000, t0); err != nil { // a denial
				t.Fatal(err)
			}
		}
		prefix := fmt.Sprintf("ServerTime=%v/", serverTime)
		ops(prefix + "warm-up")
		const n = 10
		before := tracer.n.Load()
		for i := range n {
			ops(prefix + strings.Repeat("k", i+1))
		}
		if got, want := tracer.n.Load()-before, int64(n*3*2); got != want {
			t.Fatalf("ServerTime %v: %d operations took %d round trips, want %d (2 each)", serverTime, n*3, got, want)
		}
		if !serverTime {
			before = tracer.n.Load()
			rec := federation.Reconcile{Leftover: 1, WindowEnd: t0, Token: "eu", Now: t0}
			if got, err := c.Reconcile(ctx, "k", r, rec); err != nil || got != federation.Expired {
				t.Fatalf("reconcile of an ended window: %v, %v", got, err)
			}
			if got := tracer.n.Load() - before; got != 0 {
				t.Fatalf("a reconcile of an ended window took %d round trips, want 0", got)
			}
		}
	}
}
