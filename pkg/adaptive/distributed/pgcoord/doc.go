// Package pgcoord is a distributed.Coordinator on PostgreSQL: the gates of
// a fleet of sidecars as two tables any number of processes share. It
// computes exactly what distributed.Memory computes — distributed.Beat,
// run in Go on a gate's records while the transaction holds the gate's
// lock; there is no SQL transcription of it — and a differential test
// holds the two to the same grants and the same stored records, step for
// step.
//
// # Schema
//
// New creates, when absent (the prefix is Options.Table):
//
//	<prefix>_gates: gate bytea PRIMARY KEY             -- one lock row per gate
//	<prefix>_nodes: gate, node, instance bytea,
//	                seq, local_limit, inflight, demand,
//	                applied_gen, expires_at,           -- Unix µs on the coordinator's clock
//	                share, gen, high bigint,           -- distributed.Record, field for field
//	                PRIMARY KEY (gate, node)
//
// Gate, node and instance names are bytea, not text, and always bound as
// parameters: a Go string holds any bytes, text refuses NUL and invalid
// UTF-8, and bytea compares bytewise, so two names are one gate (or one
// node) exactly when they are equal strings. A gate and node name must
// fit the primary key's index (about 2.7 kB together); a longer one is an
// error, not a panic. The unsigned counters (seq, generations) are stored
// bit for bit as bigint: only Beat compares them, in Go.
//
// # Why heartbeats of a gate are serialized
//
// A heartbeat is one READ COMMITTED transaction. Its first statement makes
// the gate's lock row exist and takes its row lock: INSERT ... ON CONFLICT
// DO UPDATE ... WHERE false inserts the row, or locks the existing one
// and writes nothing. The first heartbeats of a new gate meet on the
// primary key: the second waits for the first to commit, then locks the
// row it inserted — a per-gate FOR UPDATE on an existing row alone could
// not serialize them, as neither would find a row to lock. Only then does
// the transaction read the gate's node rows (a new statement, so a new
// snapshot: what the previous holder of the lock committed), run Beat,
// and write the reporter's row and delete the rows Beat evicted before
// COMMIT. Every writer of a gate's node rows holds its lock, so the node
// rows need no lock of their own, and the heartbeats of one gate are a
// sequence, each Beat reading the records the previous one left: Beat's
// Σ share ≤ L_global holds for the fleet, however many processes and
// connections race. The heartbeats of different gates lock different rows
// and run in parallel; one heartbeat locks one row, so none deadlocks.
//
// A row lock was preferred to pg_advisory_xact_lock on a hash of the gate:
// it is exact (no two gates share a lock), it shares no key space with
// other users of advisory locks in the database, and it is visible in
// pg_locks as a row of a named table.
//
// A stale report, or one from a duplicate live nodeId, rolls back: it
// changes nothing. A heartbeat whose reply is lost (the connection dies
// during COMMIT) returns an error without knowing whether it committed;
// the node's next heartbeat, with a higher seq, is answered from whichever
// state holds.
//
// # Round trips
//
// A heartbeat takes two round trips once its connection has prepared the
// statements: BEGIN, the lock, (the clock) and the read of the gate's
// node rows pipelined in one; the write of the reporter's row, the
// deletion of the evicted rows (when any) and COMMIT, or ROLLBACK, in the
// other. Beat cannot run inside SQL, so two is the least for a computation
// done in Go. A malformed report or config takes none. When the first
// round trip finds its pooled connection dead (the server restarted),
// nothing was committed, and it is tried once more on another connection.
//
// # Time
//
// By default a heartbeat uses the now its caller passes, as the
// federation's pgcoord does, so tests drive the coordinator on a fake
// timeline and compare it with distributed.Memory; the callers' clocks
// must then agree, since one node's record is evicted by another's clock.
// With Options.ServerTime, the production setting, it reads the
// database's clock_timestamp() inside its transaction, after the gate's
// lock is held; Grant.Now carries that time, and the node carries the
// lease end over to its own clock by Grant.ExpiresAt − Grant.Now.
//
// # Abandoned gates
//
// There is no cleanup. A node's row stays until a heartbeat of its gate
// evicts it, which the first heartbeat after its lease ends does; so a
// gate no node beats any more keeps its last rows (at most one per node
// it had) and its lock row. Safety never depends on their removal: an
// expired row is evicted by the next Beat before anything is computed
// from it. They are not removed behind Beat's back because no removal is
// free of effect: Beat keeps a returning node's own expired record (its
// seq, to refuse stale reports, and its generation, which continues), and
// a record removed early would restart it at generation 1, a grant the
// node would take for one it has seen. An operator retiring a gate deletes
// its rows in one transaction, the lock row first (which takes the gate's
// lock, so no heartbeat is halfway through):
//
//	BEGIN;
//	DELETE FROM <prefix>_gates WHERE gate = $1;
//	DELETE FROM <prefix>_nodes WHERE gate = $1;
//	COMMIT;
//
// A node that still beats the gate afterwards starts it afresh.
//
// This package has no runnable Example: every call needs a PostgreSQL
// server, which only the tests start (internal/testenv).
package pgcoord
