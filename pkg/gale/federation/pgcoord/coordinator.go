package pgcoord

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/pgtx"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// DefaultCleanupEvery is the CleanupEvery of the zero Options.
const DefaultCleanupEvery = 1000

// Options configures a Coordinator. The zero value is valid: the tables
// DefaultTable_budget and DefaultTable_reconcile, the callers' clock, and a
// cleanup every DefaultCleanupEvery operations.
type Options struct {
	// Table is the prefix of the two tables' names, <Table>_budget and
	// <Table>_reconcile: a plain lowercase SQL identifier of at most
	// MaxTable bytes (New returns ErrTable otherwise). Empty means
	// DefaultTable. Coordinators that share a prefix share budgets.
	Table string
	// ServerTime makes every operation read the database's clock
	// (clock_timestamp(), inside its transaction) instead of the now its
	// caller passes; Grant.Now then carries the database's time. It is the
	// production setting: every region agrees on window boundaries
	// whatever its own clock says. Without it (the default, for tests on a
	// fake timeline) callers' clocks must agree.
	ServerTime bool
	// CleanupEvery is how many operations pass between two opportunistic
	// cleanups, each deleting at most 2×CleanupEvery expired budget rows
	// and as many lapsed markers. 0 means DefaultCleanupEvery; negative
	// never cleans up. Correctness never depends on it.
	CleanupEvery int
}

// Coordinator is a federation.Coordinator on PostgreSQL. The zero value is
// not usable; call New. It is safe for concurrent use by any number of
// goroutines, and any number of processes may share its tables.
type Coordinator struct {
	pool       *pgxpool.Pool
	serverTime bool
	sql        statements

	// cleanupEvery is the operations between two cleanups, 0 for never;
	// sweepLimit the rows one cleanup deletes at most, per table.
	cleanupEvery, sweepLimit int64
	ops                      atomic.Int64 // operations that reached the database
}

var _ federation.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator on pool's database, creating its two tables when
// they are absent. The pool stays the caller's: New never closes it.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Coordinator, error) {
	if pool == nil {
		return nil, errors.New("pgcoord: nil pool")
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if !pgtx.PlainIdentifier(opts.Table, MaxTable) {
		return nil, fmt.Errorf("%w (got %q)", ErrTable, opts.Table)
	}
	c := &Coordinator{pool: pool, serverTime: opts.ServerTime, sql: newStatements(opts.Table, opts.ServerTime)}
	switch {
	case opts.CleanupEvery == 0:
		c.cleanupEvery = DefaultCleanupEvery
	case opts.CleanupEvery > 0:
		c.cleanupEvery = int64(opts.CleanupEvery)
	}
	c.sweepLimit = 2 * c.cleanupEvery
	if _, err := pool.Exec(ctx, c.sql.create); err != nil {
		return nil, fmt.Errorf("pgcoord: creating tables %s_budget and %s_reconcile: %w", opts.Table, opts.Table, err)
	}
	return c, nil
}

// budgetRow is a budget table row: the gale.State of a key (Window, Used,
// Prev: windowed rules use no other field) and the instant, in Unix µs,
// from which it reads as the zero State.
type budgetRow struct {
	state    gale.State
	expireAt int64
}

// at returns the row's state at now: the zero State once it has expired.
// Expiry is by this column, so no cleanup is ever needed for it.
func (r budgetRow) at(now int64) gale.State {
	if r.expireAt > now {
		return r.state
	}
	return gale.State{}
}

// Lease takes between min and max units of key's budget under rule at now
// (or at the database's clock, with ServerTime), in one transaction holding
// the key's row lock. Any key is accepted: one too long for the index is
// stored as its hash (storedKey). It returns ctx.Err() when ctx is done on
// entry, the errors of federation.CheckRule and gale.CheckArgs for invalid
// arguments, and the database's errors wrapped, with federation.ErrRefused
// as well when the database refused this request itself (refused). After an
// error the units may or may not have been taken (the commit's reply may be
// what was lost): a failed lease can only lose capacity, never grant more
// than the limit.
func (c *Coordinator) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	if err := ctx.Err(); err != nil {
		return gale.Grant{}, err
	}
	if err := federation.CheckRule(rule); err != nil {
		return gale.Grant{}, err
	}
	if err := gale.CheckArgs(rule, min, max); err != nil {
		return gale.Grant{}, err
	}
	g, err := c.lease(ctx, key, rule, min, max, now.UnixMicro())
	if err != nil {
		return gale.Grant{}, failed("lease", key, err)
	}
	return g, nil
}

// lease is Lease in two round trips: BEGIN, lockBudget, selectBudget (and
// the clock) in one; the update (when anything was granted) and COMMIT, or
// ROLLBACK, in the other. rule.Take runs between them, in Go, while the
// transaction holds the row lock.
func (c *Coordinator) lease(ctx context.Context, key string, rule gale.Rule, min, max, callers int64) (gale.Grant, error) {
	k := storedKey(key)
	var row budgetRow
	us := callers
	conn, err := pgtx.Begin(ctx, c.pool, func(b *pgx.Batch) {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED") // pinned: a pool defaulting to repeatable read would read from a snapshot older than the lock
		b.Queue(c.sql.lockBudget, k)
		b.Queue(c.sql.selectBudget, k)
		if c.serverTime {
			b.Queue(c.sql.clock) // after the lock is held: the grant's units live from this instant
		}
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&row.state.Window, &row.state.Used, &row.state.Prev, &row.expireAt); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errors.New("budget row missing under its own lock")
			}
			return err
		}
		if c.serverTime {
			return br.QueryRow().Scan(&us)
		}
		return nil
	})
	if err != nil {
		return gale.Grant{}, err
	}
	defer pgtx.Release(conn) // rolls back what a failure left open
	next, o := rule.Take(row.at(us), us, min, max)
	var b pgx.Batch
	if o.Granted > 0 {
		b.Queue(c.sql.updateBudget, k, next.Window, next.Used, next.Prev, o.ExpireAt)
	}
	// A denial rolls back: it changes nothing, not even the zero row
	// lockBudget inserted for a new key.
	if err := c.end(ctx, conn, &b, o.Granted > 0, us); err != nil {
		return gale.Grant{}, err
	}
	return o.Grant(rule, us), nil
}

// Reconcile gives back rec.Leftover units of the window ending at
// rec.WindowEnd, once per (key, WindowEnd, Token), in one transaction: the
// marker's insert decides Applied or Duplicate, and concurrent copies of
// one reconcile wait on the marker's unique key, so exactly one applies.
// A window that has ended records nothing and reports Expired, as
// federation.MemoryCoordinator does. Errors are as Lease's; after one the
// marker may or may not have been recorded, and a retry then reports
// Duplicate: the units are lost, never given twice.
func (c *Coordinator) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := federation.CheckReconcile(rule, rec); err != nil {
		return 0, err
	}
	we := rec.WindowEnd.UnixMicro()
	if !c.serverTime && we <= rec.Now.UnixMicro() {
		// A marker lapses when its window ends, so none can be live: the
		// answer needs no database.
		return federation.Expired, nil
	}
	got, err := c.reconcile(ctx, key, rule, rec, we)
	if err != nil {
		return 0, failed("reconcile", key, err)
	}
	return got, nil
}

// reconcile is Reconcile in two round trips: BEGIN, mark and selectBudget
// in one; the update (when the give-back changed the state) and COMMIT, or
// ROLLBACK, in the other.
func (c *Coordinator) reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile, we int64) (federation.Reconciled, error) {
	k, token := storedKey(key), []byte(rec.Token)
	var (
		row         budgetRow
		us, marked  int64
		budgetFound bool
	)
	conn, err := pgtx.Begin(ctx, c.pool, func(b *pgx.Batch) {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED") // pinned: a pool defaulting to repeatable read would read from a snapshot older than the lock
		if c.serverTime {
			b.Queue(c.sql.mark, k, we, token)
		} else {
			b.Queue(c.sql.mark, k, we, token, rec.Now.UnixMicro())
		}
		b.Queue(c.sql.selectBudget, k)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&us, &marked); err != nil {
			return err
		}
		err := br.QueryRow().Scan(&row.state.Window, &row.state.Used, &row.state.Prev, &row.expireAt)
		budgetFound = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // no budget: nothing to give back to
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	defer pgtx.Release(conn) // rolls back what a failure left open
	var b pgx.Batch
	switch {
	case we <= us:
		return federation.Expired, c.end(ctx, conn, &b, false, us)
	case marked == 0:
		return federation.Duplicate, c.end(ctx, conn, &b, false, us)
	}
	if next, changed := rule.Give(row.at(us), us, rec.Leftover, we); changed && budgetFound {
		b.Queue(c.sql.updateBudget, k, next.Window, next.Used, next.Prev, row.expireAt)
	}
	if err := c.end(ctx, conn, &b, true, us); err != nil {
		return 0, err
	}
	return federation.Applied, nil
}

// Healthy pings the database, within ctx.
func (c *Coordinator) Healthy(ctx context.Context) error {
	if err := c.pool.Ping(ctx); err != nil {
		return fmt.Errorf("pgcoord: healthy: %w", err)
	}
	return nil
}

// end commits (or rolls back) the writes queued in b, each of which must
// touch one row, and every CleanupEvery-th operation sweeps, after the
// transaction, what expired at now (pgtx.End; the sweep is opportunistic).
func (c *Coordinator) end(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, commit bool, now int64) error {
	rows := make([]int64, b.Len())
	for i := range rows {
		rows[i] = 1
	}
	var sweep func(*pgx.Batch)
	if c.cleanupEvery > 0 && c.ops.Add(1)%c.cleanupEvery == 0 {
		sweep = func(b *pgx.Batch) {
			b.Queue(c.sql.sweepBudgets, now, c.sweepLimit)
			b.Queue(c.sql.sweepMarks, now, c.sweepLimit)
		}
	}
	return pgtx.End(ctx, conn, b, rows, commit, sweep)
}
