package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStartPostgres: a real server answers on its URL; committed data
// survives a restart; a killed server refuses connections.
func TestStartPostgres(t *testing.T) {
	p := StartPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		t.Fatalf("connecting to %s: %v", p.URL(), err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (k text PRIMARY KEY, v bigint); INSERT INTO t VALUES ('a', 42)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	p.Restart()
	conn, err = pgx.Connect(ctx, p.URL())
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	var v int64
	if err := conn.QueryRow(ctx, "SELECT v FROM t WHERE k = 'a'").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after the restart: v = %d, %v; want 42", v, err)
	}
	conn.Close(ctx)

	p.Kill()
	if c, err := pgx.Connect(ctx, p.URL()); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a killed server")
	}
}
