// Package pgcoord is a federation.Coordinator on PostgreSQL: the
// cross-region authority (L3) as two tables any number of regions and
// processes share. It computes exactly what federation.MemoryCoordinator
// computes — gale.Rule.Take and gale.Rule.Give, run in Go on a locked row —
// and a differential test holds the two to the same answers step for step.
//
// # Schema
//
// New creates, when absent (the prefix is Options.Table):
//
//	<prefix>_budget:    key bytea PRIMARY KEY,
//	                    window_start, used, prev bigint,  -- gale.State's Window, Used, Prev
//	                    expire_at bigint                  -- Unix µs: from then on the state is the zero State
//	<prefix>_reconcile: key bytea, window_end bigint, token bytea,
//	                    lapse_at bigint,                  -- Unix µs: the window's end
//	                    PRIMARY KEY (key, window_end, token)
//
// Keys and tokens are bytea, not text: a Go string holds any bytes, and
// text refuses NUL and invalid UTF-8. The key column holds a key as it is
// up to MaxStoredKey bytes, and a longer one (or one starting with the byte
// 0xFF) as 0xFF and its SHA-256: the primary key's index refuses entries
// over about 2.7 kB, and a descriptor value alone may be 8 KiB. No key kept
// whole can equal a hash, so no two keys share a row (keys.go argues it).
// The column is window_start, not window, which is a reserved word in SQL.
//
// # Errors
//
// An error the database answered for this request alone — SQLSTATE class
// 22 (data exception), 23 (integrity constraint) or 54 (program limit) —
// wraps federation.ErrRefused beside the server's error: the database is
// reachable, and a region must not count it as an outage. A connection
// failure, a timeout, a shutdown (57), a standby's read-only transaction
// (25006), a serialization failure (40) or a lack of resources (53) does
// not.
//
// # Why the limit holds
//
// A Lease is one transaction: it makes the key's row exist and takes its
// row lock (INSERT ... ON CONFLICT DO UPDATE ... WHERE false inserts a zero
// row, or locks the existing one and writes nothing), reads the row, runs
// rule.Take in Go, and writes the new state before COMMIT, or rolls back a
// denial, which changes nothing. The row lock makes the leases of one key
// a sequence: each reads the state the previous one committed, so the
// grants of a window sum to what Take allows from the zero State, at most
// the limit less what Reconcile gave back, however many regions, processes
// and connections race. A row whose expire_at has passed reads as the zero
// State: expiry is by column, so safety never relies on a cleanup job, and
// a window's count is never carried into the next.
//
// A Reconcile is one transaction too: it inserts the marker (key,
// window_end, token) with ON CONFLICT, which makes a concurrent copy of
// the same reconcile wait on the unique key and then find the marker, so
// exactly one copy applies; it then locks the budget row, runs rule.Give
// in Go and writes the result. A marker lapses when its window ends: a
// reconcile of an ended window records nothing and reports Expired, as
// the MemoryCoordinator does. The locks are taken in one order (marker,
// then budget row), so two operations never deadlock.
//
// An operation whose reply is lost (the connection dies during COMMIT)
// returns an error without knowing whether it committed: a lease's units
// are then lost to the caller and a reconcile's retry reports Duplicate.
// Capacity can be lost; the limit can never be exceeded.
//
// # Round trips
//
// Each operation takes two round trips once its connection has prepared
// the statements: BEGIN, the locking statements (and, with ServerTime,
// the clock) pipelined in one; the write and COMMIT, or ROLLBACK, in the
// other. Take cannot run inside one SQL statement, so two is the least
// for arithmetic done in Go. A reconcile of an ended window on the
// callers' clock needs none. When the first round trip finds its pooled
// connection dead (the server restarted), nothing was committed, and it
// is tried once more on another connection.
//
// # Time
//
// By default an operation uses the now its caller passes, so tests drive
// the coordinator on a fake timeline and compare it with the
// MemoryCoordinator; callers' clocks must then agree. With
// Options.ServerTime it reads the database's clock_timestamp() inside its
// transaction, after the row lock is held, so that a grant's units live
// from the moment the grant is decided; Grant.Now carries that time, and
// Grant.WindowEnd − Grant.Now is how long they live.
//
// # Cleanup
//
// Every Options.CleanupEvery operations, one deletes, after its own
// COMMIT, a bounded number of budget rows that expired and markers that
// lapsed at its now, skipping rows another transaction holds (SKIP LOCKED).
// It changes no answer: an expired row reads as a missing one. On the
// callers' clock, "expired" is the deleting caller's view, which is why
// their clocks must agree there.
//
// This package has no runnable Example: every call needs a PostgreSQL
// server, which only the tests start (internal/testenv).
package pgcoord
