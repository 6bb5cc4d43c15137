package pgcoord_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// BenchmarkLease measures granted leases on a local server. Each lease is
// two round trips (TestRoundTrips holds it to that): BEGIN, the
// insert-or-lock and the locked read pipelined in one; the update and
// COMMIT in the other. OneKey serialises on one row lock; ManyKeys runs
// leases on distinct keys in parallel.
func BenchmarkLease(b *testing.B) {
	pg := testenv.StartPostgres(b)
	c := newCoordinator(b, newPool(b, pg, nil), pgcoord.Options{})
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: gale.MaxLimit, Period: time.Hour}
	ctx, now := context.Background(), storetest.Timeline()
	b.Run("OneKey", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Lease(ctx, "one", r, 1, 1, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ManyKeys", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("many/%d", next.Add(1))
			for pb.Next() {
				if _, err := c.Lease(ctx, key, r, 1, 1, now); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
