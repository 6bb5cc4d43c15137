package pgcoord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/pgtx"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Options configures a Coordinator. The zero value is valid: the tables
// DefaultTable_gates and DefaultTable_nodes, on the callers' clock.
type Options struct {
	// Table is the prefix of the two tables' names, <Table>_gates and
	// <Table>_nodes: a plain lowercase SQL identifier of at most MaxTable
	// bytes (New returns ErrTable otherwise). Empty means DefaultTable.
	// Coordinators that share a prefix share gates.
	Table string
	// ServerTime makes every heartbeat read the database's clock
	// (clock_timestamp(), inside its transaction, once the gate's lock is
	// held) instead of the now its caller passes; Grant.Now then carries
	// the database's time. It is the production setting: leases are
	// compared, and records evicted, on one clock whatever each node's
	// own says. Without it (the default, as in the federation's pgcoord,
	// for tests on a fake timeline) the callers' clocks must agree.
	ServerTime bool
}

// Coordinator is a distributed.Coordinator on PostgreSQL. The zero value is
// not usable; call New. It is safe for concurrent use by any number of
// goroutines, and any number of processes may share its tables: the
// heartbeats of one gate are serialized by the gate's row lock, those of
// different gates run in parallel.
type Coordinator struct {
	pool       *pgxpool.Pool
	serverTime bool
	sql        statements
}

var _ distributed.Coordinator = (*Coordinator)(nil)

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
	c := &Coordinator{pool: pool, serverTime: opts.ServerTime, sql: newStatements(opts.Table)}
	if _, err := pool.Exec(ctx, c.sql.create); err != nil {
		return nil, fmt.Errorf("pgcoord: creating tables %s_gates and %s_nodes: %w", opts.Table, opts.Table, err)
	}
	return c, nil
}

// Heartbeat implements distributed.Coordinator: it runs distributed.Beat on
// gate's records at now (or at the database's clock, with ServerTime) in
// one transaction holding the gate's lock, and writes back what the beat
// changed. It returns ctx.Err() when ctx is done on entry; a malformed
// report or config, a duplicate live nodeId, as Beat does, before or
// without writing anything; and the database's errors wrapped. After a
// database error the beat may or may not have been recorded (the commit's
// reply may be what was lost); the node's next heartbeat, with a higher
// seq, is answered from whichever state holds.
func (c *Coordinator) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	if err := ctx.Err(); err != nil {
		return distributed.Grant{}, err
	}
	if err := rep.Validate(); err != nil {
		return distributed.Grant{}, err
	}
	if err := cfg.Validate(); err != nil {
		return distributed.Grant{}, err
	}
	g, refused, err := c.heartbeat(ctx, gate, rep, cfg, now.UnixMicro())
	if err != nil {
		return distributed.Grant{}, fmt.Errorf("pgcoord: heartbeat of %q on gate %q: %w", rep.Node, gate, err)
	}
	if refused != nil {
		return distributed.Grant{}, refused
	}
	return g, nil
}

// heartbeat is Heartbeat in two round trips: BEGIN, lockGate, (the clock)
// and selectNodes in one; the reporter's row, the deletion of the evicted
// rows and COMMIT, or ROLLBACK of a stale or refused report, in the other.
// Beat runs between them, in Go, while the transaction holds the gate's
// lock. refused is Beat's error: the answer to the report, not a failure.
func (c *Coordinator) heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, callers int64) (g distributed.Grant, refused, err error) {
	key := []byte(gate)
	var recs []distributed.Record
	us := callers
	conn, err := pgtx.Begin(ctx, c.pool, func(b *pgx.Batch) {
		b.Queue(begin)
		b.Queue(c.sql.lockGate, key)
		if c.serverTime {
			b.Queue(c.sql.clock) // after the lock is held: the lease runs from this instant
		}
		b.Queue(c.sql.selectNodes, key)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if c.serverTime {
			if err := br.QueryRow().Scan(&us); err != nil {
				return err
			}
		}
		var err error
		recs, err = scanRecords(br.Query())
		return err
	})
	if err != nil {
		return distributed.Grant{}, nil, err
	}
	defer pgtx.Release(conn) // rolls back what a failure left open

	next, g, refused := distributed.Beat(recs, rep, cfg, us)
	var b pgx.Batch
	var rows []int64 // the rows each queued write must touch
	if refused == nil && g.Status == distributed.Granted {
		rows = c.queueWrites(&b, key, recs, next, rep.Node)
	}
	// A stale or refused report rolls back: it changed nothing.
	if err := pgtx.End(ctx, conn, &b, rows, len(rows) > 0, nil); err != nil {
		return distributed.Grant{}, nil, err
	}
	return g, refused, nil
}

// Leave implements distributed.Leaver: in one transaction holding the
// gate's lock, as a heartbeat does, it deletes node's row if instance holds
// it.
func (c *Coordinator) Leave(ctx context.Context, gate, node, instance string) (bool, error) {
	key := []byte(gate)
	var removed bool
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, c.sql.lockGate, key); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, c.sql.leaveNode, key, []byte(node), []byte(instance))
		removed = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("pgcoord: %q leaving gate %q: %w", node, gate, err)
	}
	return removed, nil
}

// queueWrites queues in b what a granted beat changed from recs to next
// (sorted by Node): the reporter's row, inserted or updated, and one
// deletion of the rows Beat evicted. No other record changes in a beat.
// It returns the rows each write must touch.
func (c *Coordinator) queueWrites(b *pgx.Batch, key []byte, recs, next []distributed.Record, reporter string) []int64 {
	i, _ := slices.BinarySearchFunc(next, reporter, byNode)
	me := next[i]
	write := c.sql.insertNode
	var evicted [][]byte
	for _, r := range recs {
		if r.Node == reporter {
			write = c.sql.updateNode
			continue
		}
		if _, kept := slices.BinarySearchFunc(next, r.Node, byNode); !kept {
			evicted = append(evicted, []byte(r.Node))
		}
	}
	b.Queue(write, key, []byte(me.Node), []byte(me.Instance), int64(me.Seq), me.Local, me.Inflight, me.Demand,
		int64(me.AppliedGen), me.ExpiresAt, me.Share, int64(me.Gen), me.High)
	rows := []int64{1}
	if len(evicted) > 0 {
		b.Queue(c.sql.deleteNodes, key, evicted)
		rows = append(rows, int64(len(evicted)))
	}
	return rows
}

// byNode orders records sorted by Node against a node name.
func byNode(r distributed.Record, node string) int { return strings.Compare(r.Node, node) }

// Records returns gate's records as the last committed heartbeat left
// them, sorted by Node: for inspection and tests. It reads without the
// gate's lock, in one statement (so one snapshot).
func (c *Coordinator) Records(ctx context.Context, gate string) ([]distributed.Record, error) {
	recs, err := scanRecords(c.pool.Query(ctx, c.sql.records, []byte(gate)))
	if err != nil {
		return nil, fmt.Errorf("pgcoord: records of gate %q: %w", gate, err)
	}
	return recs, nil
}

// text scans a bytea into a Go string with one copy.
type text string

func (s *text) ScanBytes(b []byte) error {
	*s = text(b)
	return nil
}

// scanRecords reads the rows of a query of nodeColumns. The unsigned
// counters (seq, generations) are stored as bigint bit for bit: SQL never
// compares them, Beat does, after the conversion back.
func scanRecords(rows pgx.Rows, err error) ([]distributed.Record, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []distributed.Record
	for rows.Next() {
		var (
			r                 distributed.Record
			node, instance    text
			seq, applied, gen int64
		)
		if err := rows.Scan(&node, &instance, &seq, &r.Local, &r.Inflight, &r.Demand, &applied, &r.ExpiresAt, &r.Share, &gen, &r.High); err != nil {
			return nil, err
		}
		r.Node, r.Instance = string(node), string(instance)
		r.Seq, r.AppliedGen, r.Gen = uint64(seq), uint64(applied), uint64(gen)
		recs = append(recs, r)
	}
	return recs, rows.Err()
}
