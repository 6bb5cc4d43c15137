// Package pgtx is the PostgreSQL plumbing the coordinators built on pgx
// share: table-prefix checks, the clock expression, and transactions opened
// in one pipelined round trip that survive a pooled connection the server
// has dropped.
package pgtx

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClockMicros is the database's clock in Unix microseconds: the
// clock_timestamp() of the moment the statement evaluates it (not the
// transaction's start, which now() would be). extract(epoch ...) is numeric
// from PostgreSQL 14 on, so the product is exact.
const ClockMicros = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

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
