package pgcoord

import (
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"

	"github.com/throttlekit/throttlekit/internal/pgtx"
)

// DefaultTable is the table prefix of the zero Options.
const DefaultTable = "throttlekit_federation"

// MaxTable is the longest table prefix, in bytes: with the longest name
// derived from it ("<prefix>_reconcile_pkey", the marker table's primary
// key index) it stays within PostgreSQL's 63-byte identifiers, which the
// server would otherwise truncate, and two prefixes could then name one
// table.
const MaxTable = pgtx.MaxIdentifier - len("_reconcile_pkey")

// ErrTable is returned by New for an Options.Table that is not a plain SQL
// identifier: 1..MaxTable bytes of lowercase ASCII letters, digits and
// underscores, not starting with a digit.
var ErrTable = pgtx.PrefixError("pgcoord", MaxTable)

// statements is the SQL of one Coordinator, built once by New for its
// tables and clock. Parameters are numbered as each comment says.
type statements struct {
	// create makes both tables when absent, under an advisory lock: two
	// processes running CREATE TABLE IF NOT EXISTS at once can otherwise
	// fail on the catalog's unique index. No parameters (simple protocol).
	create string
	// lockBudget makes key's budget row exist and holds its row lock: it
	// inserts a zero row, or on conflict locks the existing row and
	// updates nothing (an ON CONFLICT DO UPDATE locks the row before its
	// WHERE is evaluated). A row a concurrent cleanup deletes meanwhile
	// makes the server retry the insert. $1 key.
	lockBudget string
	// selectBudget reads key's budget row and locks it (a no-op after
	// lockBudget, which already holds the same lock). $1 key.
	selectBudget string
	// updateBudget writes key's budget row. $1 key, $2 window_start,
	// $3 used, $4 prev, $5 expire_at.
	updateBudget string
	// clock reads the database's clock, in Unix µs. No parameters.
	clock string
	// mark records the reconcile marker (key, window_end, token) unless the
	// window has ended at the coordinator's now, or a live marker exists;
	// it returns that now and how many markers it recorded (0 or 1).
	// $1 key, $2 window_end, $3 token, and with the callers' clock $4 now.
	mark string
	// sweepBudgets and sweepMarks delete at most $2 rows that expired or
	// lapsed at $1 (Unix µs), skipping rows other transactions hold.
	sweepBudgets, sweepMarks string
}

// newStatements builds the SQL of the tables named by prefix (already
// checked by checkTable). With serverTime, mark reads the database's clock.
func newStatements(prefix string, serverTime bool) statements {
	budget := pgx.Identifier{prefix + "_budget"}.Sanitize()
	marks := pgx.Identifier{prefix + "_reconcile"}.Sanitize()
	h := fnv.New64a()
	h.Write([]byte("throttlekit/pgcoord:" + prefix))
	now := "$4::bigint"
	if serverTime {
		now = pgtx.ClockMicros
	}
	return statements{
		// fillfactor leaves room on each page for an updated row's new
		// version: updates touch no indexed column, so they stay HOT (no
		// index write), and a lease's write is one heap page.
		create: fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d);
CREATE TABLE IF NOT EXISTS %s (
	key          bytea  PRIMARY KEY,
	window_start bigint NOT NULL,
	used         bigint NOT NULL,
	prev         bigint NOT NULL,
	expire_at    bigint NOT NULL
) WITH (fillfactor = 80);
CREATE TABLE IF NOT EXISTS %s (
	key        bytea  NOT NULL,
	window_end bigint NOT NULL,
	token      bytea  NOT NULL,
	lapse_at   bigint NOT NULL,
	PRIMARY KEY (key, window_end, token)
)`, int64(h.Sum64()), budget, marks),
		lockBudget: `INSERT INTO ` + budget + ` AS b (key, window_start, used, prev, expire_at) VALUES ($1, 0, 0, 0, 0)
ON CONFLICT (key) DO UPDATE SET expire_at = b.expire_at WHERE false`,
		selectBudget: `SELECT window_start, used, prev, expire_at FROM ` + budget + ` WHERE key = $1 FOR NO KEY UPDATE`,
		updateBudget: `UPDATE ` + budget + ` SET window_start = $2, used = $3, prev = $4, expire_at = $5 WHERE key = $1`,
		clock:        `SELECT ` + pgtx.ClockMicros,
		mark: fmt.Sprintf(`WITH clock AS (SELECT %[1]s AS now),
recorded AS (
	INSERT INTO %[2]s AS m (key, window_end, token, lapse_at)
	SELECT $1::bytea, $2::bigint, $3::bytea, $2::bigint FROM clock WHERE $2::bigint > clock.now
	ON CONFLICT (key, window_end, token) DO UPDATE SET lapse_at = EXCLUDED.lapse_at WHERE m.lapse_at <= %[1]s
	RETURNING 1
)
SELECT clock.now, (SELECT count(*) FROM recorded) FROM clock`, now, marks),
		sweepBudgets: `DELETE FROM ` + budget + ` WHERE key IN (
	SELECT key FROM ` + budget + ` WHERE expire_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		sweepMarks: `DELETE FROM ` + marks + ` WHERE (key, window_end, token) IN (
	SELECT key, window_end, token FROM ` + marks + ` WHERE lapse_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
	}
}
