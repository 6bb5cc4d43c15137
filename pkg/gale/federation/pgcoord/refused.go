package pgcoord

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// failed is the error an operation op on key ended with: err, naming op
// and key, and wrapping federation.ErrRefused as well when the database
// answered and refused this request (refused).
func failed(op, key string, err error) error {
	if refused(err) {
		return fmt.Errorf("pgcoord: %s %s: %w (%w)", op, quoteKey(key), err, federation.ErrRefused)
	}
	return fmt.Errorf("pgcoord: %s %s: %w", op, quoteKey(key), err)
}

// refused reports whether err is the database refusing this request itself:
// a server error of SQLSTATE class 22 (data exception: a value out of
// range), 23 (integrity constraint violation) or 54 (program limit
// exceeded: an index entry too large). Every other failure says the
// database cannot serve requests now, whatever their arguments: class 08
// (connection exception), 25 (25006, a read-only transaction: a standby,
// as during a failover), 40 (serialization failure, deadlock), 53
// (insufficient resources), 57 (operator intervention: shutdown, query
// cancelled), any other server error, and every error without a server
// reply (a dead connection, a timeout).
func refused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || len(pgErr.Code) != 5 {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}
