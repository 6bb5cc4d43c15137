package pgcoord_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// testRefusals: an error the database answers for this request alone —
// SQLSTATE class 22, 23 or 54 — wraps federation.ErrRefused and the
// server's error; one that says it cannot serve requests now does not.
// Triggers make a real server raise each SQLSTATE; a CHECK constraint
// refuses one lease and not the next.
func testRefusals(t *testing.T, pool *pgxpool.Pool) {
	ctx, t0 := context.Background(), storetest.Timeline()
	c := newCoordinator(t, pool, pgcoord.Options{Table: "refusals", CleanupEvery: -1})
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cases := []struct {
		code    string
		refused bool
	}{
		{"22003", true},  // numeric value out of range
		{"22021", true},  // character not in repertoire
		{"23505", true},  // unique violation
		{"54000", true},  // program limit exceeded: an index entry too large
		{"08006", false}, // connection failure
		{"25006", false}, // read-only transaction: a standby, during a failover
		{"40001", false}, // serialization failure
		{"40P01", false}, // deadlock
		{"53200", false}, // out of memory
		{"57P01", false}, // admin shutdown
		{"57014", false}, // query cancelled
		{"42501", false}, // insufficient privilege: every request fails alike
	}
	for _, tc := range cases {
		exec(fmt.Sprintf(`CREATE OR REPLACE FUNCTION refusals_raise() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'raised by the test' USING ERRCODE = '%s'; END $$`, tc.code))
		for _, tbl := range []string{"refusals_budget", "refusals_reconcile"} {
			exec(fmt.Sprintf(`CREATE OR REPLACE TRIGGER raise BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION refusals_raise()`, tbl))
		}
		key := "k/" + tc.code
		_, lerr := c.Lease(ctx, key, perMinute, 1, 1, t0)
		_, rerr := c.Reconcile(ctx, key, perMinute, federation.Reconcile{Leftover: 1, WindowEnd: t0.Add(time.Minute), Token: "eu", Now: t0})
		for op, err := range map[string]error{"lease": lerr, "reconcile": rerr} {
			if err == nil || !strings.Contains(err.Error(), "SQLSTATE "+tc.code) {
				t.Fatalf("%s under a trigger raising %s: %v, want the server's error", op, tc.code, err)
			}
			if errors.Is(err, federation.ErrRefused) != tc.refused {
				t.Errorf("%s: SQLSTATE %s: errors.Is(err, ErrRefused) = %v, want %v (%v)", op, tc.code, !tc.refused, tc.refused, err)
			}
		}
	}
	exec(`DROP TRIGGER raise ON refusals_budget; DROP TRIGGER raise ON refusals_reconcile`)

	// A constraint the table holds refuses one lease; the next works.
	exec(`ALTER TABLE refusals_budget ADD CONSTRAINT at_most_5 CHECK (used <= 5)`)
	if _, err := c.Lease(ctx, "check", perMinute, 6, 6, t0); !errors.Is(err, federation.ErrRefused) || !strings.Contains(err.Error(), "23514") {
		t.Fatalf("lease of 6 under CHECK (used <= 5): %v, want ErrRefused and the check violation, 23514", err)
	}
	if g, err := c.Lease(ctx, "check", perMinute, 5, 5, t0); err != nil || g.Granted != 5 {
		t.Fatalf("lease of 5 after the refused one: %+v, %v", g, err)
	}
	// Invalid arguments are the caller's bug, found before any I/O.
	if _, err := c.Lease(ctx, "check", gale.Rule{Algorithm: gale.GCRA, Limit: 1, Period: time.Second}, 1, 1, t0); err == nil || errors.Is(err, federation.ErrRefused) {
		t.Fatalf("lease under GCRA: %v, want an error that is not ErrRefused", err)
	}
}
