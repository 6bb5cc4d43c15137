// Package pgtx is the PostgreSQL plumbing the coordinators built on pgx
// share: table-prefix checks, the clock expression, and transactions opened
// in one pipelined round trip that survive a pooled connection the server
// has dropped.
package pgtx

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClockMicros is the database's clock in Unix microseconds: the
// clock_timestamp() of the moment the statement evaluates it (not the
// transaction's start, which now() would be). extract(epoch ...) is numeric
// from PostgreSQL 14 on, so the product is exact.
const ClockMicros = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

// MaxIdentifier is PostgreSQL's longest identifier, in bytes: a longer one
// is truncated, so two table prefixes could name one table.
const MaxIdentifier = 63

// PrefixError is the error for a table prefix that is not a plain
// identifier (PlainIdentifier) of at most max bytes, max being
// MaxIdentifier less the longest suffix the coordinator derives names with;
// a coordinator exports it as its ErrTable.
func PrefixError(pkg string, max int) error {
	return fmt.Errorf("%s: table prefix must be 1..%d bytes of [a-z0-9_], not starting with a digit", pkg, max)
}

// RollbackTimeout bounds the ROLLBACK Release sends for a connection left
// inside a transaction.
const RollbackTimeout = time.Second

// PlainIdentifier reports whether name is a plain lowercase SQL identifier
// of 1..max bytes: ASCII letters, digits and underscores, not starting with
// a digit. Uppercase is refused although the names are quoted: a quoted
// "Gates" and an unquoted Gates name different tables, a trap for whoever
// queries them by hand.
func PlainIdentifier(name string, max int) bool {
	if name == "" || len(name) > max || ('0' <= name[0] && name[0] <= '9') {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Begin acquires a connection from pool and sends, in one round trip, the
// batch queue builds (which opens a transaction and locks what the caller
// needs), reading its replies with read. It returns the connection, its
// transaction open. A pooled connection may be dead (the server restarted
// since it was last used); when the connection died under the batch
// nothing can have been committed, so Begin tries once more, on another.
func Begin(ctx context.Context, pool *pgxpool.Pool, queue func(*pgx.Batch), read func(pgx.BatchResults) error) (*pgxpool.Conn, error) {
	for attempt := 0; ; attempt++ {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		// A batch is built afresh for each connection: pgx stores the
		// connection's prepared statements in the queued queries.
		var b pgx.Batch
		queue(&b)
		br := conn.SendBatch(ctx, &b)
		err = read(br)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			return conn, nil
		}
		dead := conn.Conn().IsClosed()
		Release(conn)
		if !dead || attempt > 0 || ctx.Err() != nil {
			return nil, err
		}
	}
}

// Release returns conn to its pool, rolling back a transaction left open
// (a failed or abandoned operation) so the next user starts clean.
func Release(conn *pgxpool.Conn) {
	pc := conn.Conn().PgConn()
	if !pc.IsClosed() && !pc.IsBusy() && pc.TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), RollbackTimeout)
		_, _ = conn.Exec(ctx, "ROLLBACK")
		cancel()
	}
	conn.Release()
}

// End sends on conn, in one round trip, the writes queued in b, then COMMIT
// (or ROLLBACK), then whatever after queues (statements to run outside the
// transaction, whose errors are ignored; nil for none). The i-th write must
// touch rows[i] rows: a write that fails (a unique violation: a lock that
// did not hold) aborts the transaction, so the pipelined COMMIT commits
// nothing; a count that is off is reported as an error, though by then the
// COMMIT queued behind it has run.
func End(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, rows []int64, commit bool, after func(*pgx.Batch)) error {
	if len(rows) != b.Len() {
		return fmt.Errorf("pgtx: %d writes queued, %d row counts", b.Len(), len(rows))
	}
	if commit {
		b.Queue("COMMIT")
	} else {
		b.Queue("ROLLBACK")
	}
	if after != nil {
		after(b)
	}
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	for _, want := range rows {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != want {
			return fmt.Errorf("%s touched %d rows, want %d", tag, tag.RowsAffected(), want)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return err
	}
	if commit && tag.String() != "COMMIT" {
		return fmt.Errorf("commit answered %q", tag)
	}
	if after != nil {
		return nil // what ran after the transaction is only ever opportunistic
	}
	return br.Close()
}
