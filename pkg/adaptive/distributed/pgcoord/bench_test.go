package pgcoord_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
)

// BenchmarkHeartbeat measures granted heartbeats on a local server. Each
// is two round trips (testRoundTrips holds it to that): BEGIN, the gate's
// lock and the read of its 8 node rows pipelined in one; the update of the
// reporter's row and COMMIT in the other. OneGate has 8 nodes take turns
// on one gate, serialized by its lock; ManyGates beats distinct gates in
// parallel.
func BenchmarkHeartbeat(b *testing.B) {
	pg := testenv.StartPostgres(b)
	c := newCoordinator(b, newPool(b, pg, nil), pgcoord.Options{})
	ctx := context.Background()
	cfg := distributed.Config{LeaseTTL: time.Hour, Handoff: true}
	b.Run("OneGate", func(b *testing.B) {
		b.ReportAllocs()
		var seq uint64
		var gens [8]uint64
		for b.Loop() {
			n := seq % 8
			seq++
			g, err := c.Heartbeat(ctx, "one", distributed.Report{Node: fmt.Sprintf("n%d", n), Instance: "i", Seq: seq,
				Local: 100, AppliedGen: gens[n]}, cfg, t0)
			if err != nil {
				b.Fatal(err)
			}
			gens[n] = g.Gen
		}
	})
	b.Run("ManyGates", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			gate := fmt.Sprintf("many/%d", next.Add(1))
			var seq, gen uint64
			for pb.Next() {
				seq++
				g, err := c.Heartbeat(ctx, gate, distributed.Report{Node: "n", Instance: "i", Seq: seq, Local: 100, AppliedGen: gen}, cfg, t0)
				if err != nil {
					b.Error(err)
					return
				}
				gen = g.Gen
			}
		})
	})
}
