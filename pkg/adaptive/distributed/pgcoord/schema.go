package pgcoord

import (
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"

	"github.com/throttlekit/throttlekit/internal/pgtx"
)

// DefaultTable is the table prefix of the zero Options.
const DefaultTable = "throttlekit_adaptive"

// MaxTable is the longest table prefix, in bytes: with the longest name
// derived from it ("<prefix>_nodes_pkey", the node table's primary key
// index) it stays within PostgreSQL's 63-byte identifiers, which the
// server would otherwise truncate, and two prefixes could then name one
// table.
const MaxTable = pgtx.MaxIdentifier - len("_nodes_pkey")

// ErrTable is returned by New for an Options.Table that is not a plain SQL
// identifier: 1..MaxTable bytes of lowercase ASCII letters, digits and
// underscores, not starting with a digit.
var ErrTable = pgtx.PrefixError("pgcoord", MaxTable)

// begin opens a heartbeat's transaction. READ COMMITTED is spelled out
// rather than inherited from default_transaction_isolation: the read of
// the node rows must see what the previous holder of the gate's lock
// committed, and under REPEATABLE READ it would read the snapshot taken
// when the lock statement started, before that holder committed — Beat
// would run on stale records and the cap would break (the tests run one
// pool whose sessions default to REPEATABLE READ).
const begin = "BEGIN ISOLATION LEVEL READ COMMITTED"

// nodeColumns are the node table's columns after gate, in the order of
// the Record fields that scanRecord and the writes use.
const nodeColumns = "node, instance, seq, local_limit, inflight, demand, applied_gen, expires_at, share, gen, high"

// statements is the SQL of one Coordinator, built once by New for its
// tables. Parameters are numbered as each comment says.
type statements struct {
	// create makes both tables when absent, under an advisory lock: two
	// processes running CREATE TABLE IF NOT EXISTS at once can otherwise
	// fail on the catalog's unique index. No parameters (simple protocol).
	create string
	// lockGate makes gate's lock row exist and holds its row lock: it
	// inserts the row, or on conflict locks the existing one and updates
	// nothing (an ON CONFLICT DO UPDATE locks the row before its WHERE is
	// evaluated). Two first heartbeats of a new gate meet on the primary
	// key: the second waits for the first to commit (or roll back), then
	// locks the row it inserted (or inserts it). $1 gate.
	lockGate string
	// selectNodes reads gate's node rows, in no order: Beat takes them in
	// any. No FOR UPDATE: every writer of a gate's node rows holds the
	// gate's lock, and under READ COMMITTED this statement, run after the
	// lock was granted, reads what the previous holder committed. $1 gate.
	selectNodes string
	// records is selectNodes sorted by node, bytewise (bytea compares as
	// Go strings do). $1 gate.
	records string
	// insertNode and updateNode write the reporter's row: $1 gate, then
	// the columns of nodeColumns in order. insertNode has no ON CONFLICT:
	// under the gate's lock a node Beat found absent is absent, and a
	// unique violation would say the lock failed rather than overwrite.
	insertNode, updateNode string
	// deleteNodes deletes the evicted rows: $1 gate, $2 their nodes
	// (bytea[]).
	deleteNodes string
	// leaveNode deletes a node's row if its instance holds it: $1 gate, $2
	// node, $3 instance.
	leaveNode string
	// clock reads the database's clock, in Unix µs. No parameters.
	clock string
}

// newStatements builds the SQL of the tables named by prefix (already
// checked by checkTable).
func newStatements(prefix string) statements {
	gates := pgx.Identifier{prefix + "_gates"}.Sanitize()
	nodes := pgx.Identifier{prefix + "_nodes"}.Sanitize()
	h := fnv.New64a()
	h.Write([]byte("throttlekit/adaptive/pgcoord:" + prefix))
	return statements{
		// fillfactor leaves room on each page for an updated row's new
		// version: a heartbeat's update touches no indexed column, so it
		// stays HOT (no index write) and writes one heap page. A gate's
		// row is never updated, only locked.
		create: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d);
CREATE TABLE IF NOT EXISTS %s (
	gate bytea PRIMARY KEY
);
CREATE TABLE IF NOT EXISTS %s (
	gate        bytea  NOT NULL,
	node        bytea  NOT NULL,
	instance    bytea  NOT NULL,
	seq         bigint NOT NULL,
	local_limit bigint NOT NULL,
	inflight    bigint NOT NULL,
	demand      bigint NOT NULL,
	applied_gen bigint NOT NULL,
	expires_at  bigint NOT NULL,
	share       bigint NOT NULL,
	gen         bigint NOT NULL,
	high        bigint NOT NULL,
	PRIMARY KEY (gate, node)
) WITH (fillfactor = 80)`, int64(h.Sum64()), gates, nodes),
		lockGate:    `INSERT INTO ` + gates + ` AS g (gate) VALUES ($1) ON CONFLICT (gate) DO UPDATE SET gate = g.gate WHERE false`,
		selectNodes: `SELECT ` + nodeColumns + ` FROM ` + nodes + ` WHERE gate = $1`,
		records:     `SELECT ` + nodeColumns + ` FROM ` + nodes + ` WHERE gate = $1 ORDER BY node`,
		insertNode:  `INSERT INTO ` + nodes + ` (gate, ` + nodeColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		updateNode: `UPDATE ` + nodes + ` SET instance = $3, seq = $4, local_limit = $5, inflight = $6, demand = $7,
	applied_gen = $8, expires_at = $9, share = $10, gen = $11, high = $12 WHERE gate = $1 AND node = $2`,
		deleteNodes: `DELETE FROM ` + nodes + ` WHERE gate = $1 AND node = ANY($2::bytea[])`,
		leaveNode:   `DELETE FROM ` + nodes + ` WHERE gate = $1 AND node = $2 AND instance = $3`,
		clock:       `SELECT ` + pgtx.ClockMicros,
	}
}
