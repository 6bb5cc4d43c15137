package pgcoord_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
)

// roundTrips counts the round trips a pgx connection makes: one per batch
// and one per query (prepares are made once per connection, before the
// count starts).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// testRoundTrips: every kind of heartbeat — a new gate, a new node, an
// update, one that evicts, a stale and a duplicate report — takes two
// round trips on either clock, a malformed report none.
func testRoundTrips(t *testing.T, pg *testenv.Postgres) {
	tracer := &roundTrips{}
	pool := newPool(t, pg, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1 // one connection, whose statements the warm-up prepares
		cfg.ConnConfig.Tracer = tracer
	})
	ctx := context.Background()
	short := distributed.Config{LeaseTTL: time.Second}
	for _, serverTime := range []bool{false, true} {
		c := newCoordinator(t, pool, pgcoord.Options{Table: "round_trips", ServerTime: serverTime})
		beats := func(gate string) {
			steps := []struct {
				rep  distributed.Report
				cfg  distributed.Config
				now  time.Time
				want error
			}{
				{distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 10}, short, t0, nil},                         // a new gate
				{distributed.Report{Node: "b", Instance: "i", Seq: 1, Local: 10}, hour, t0, nil},                          // a new node
				{distributed.Report{Node: "b", Instance: "i", Seq: 2, Local: 10}, hour, t0, nil},                          // an update
				{distributed.Report{Node: "b", Instance: "i", Seq: 2, Local: 10}, hour, t0, nil},                          // stale
				{distributed.Report{Node: "b", Instance: "j", Seq: 9, Local: 10}, hour, t0, distributed.ErrDuplicateNode}, // a duplicate
				{distributed.Report{Node: "b", Instance: "i", Seq: 3, Local: 10}, hour, t0.Add(time.Minute), nil},         // evicts a (on the callers' clock)
			}
			for i, s := range steps {
				if _, err := c.Heartbeat(ctx, gate, s.rep, s.cfg, s.now); !errors.Is(err, s.want) {
					t.Fatalf("step %d: %v, want %v", i, err, s.want)
				}
			}
		}
		prefix := fmt.Sprintf("ServerTime=%v/", serverTime)
		beats(prefix + "warm-up")
		const n, each = 5, 6
		before := tracer.n.Load()
		for i := range n {
			beats(fmt.Sprintf("%s%d", prefix, i))
		}
		if got, want := tracer.n.Load()-before, int64(n*each*2); got != want {
			t.Fatalf("ServerTime %v: %d heartbeats took %d round trips, want %d (2 each)", serverTime, n*each, got, want)
		}
		before = tracer.n.Load()
		if _, err := c.Heartbeat(ctx, prefix+"bad", distributed.Report{Node: "a", Instance: "i"}, hour, t0); !errors.Is(err, distributed.ErrBadReport) {
			t.Fatalf("a report of seq 0: %v, want ErrBadReport", err)
		}
		if got := tracer.n.Load() - before; got != 0 {
			t.Fatalf("a malformed report took %d round trips, want 0", got)
		}
	}
}
