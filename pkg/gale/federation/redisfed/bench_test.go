package redisfed_test

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// benchRule always has units to grant.
var benchRule = gale.Rule{Algorithm: gale.FixedWindow, Limit: gale.MaxLimit, Period: time.Hour}

// BenchmarkCoordinatorLease measures leases through the coordinator (the
// store's pipelined lease script) from 1 and 16 concurrent callers.
//
//	go test -run '^$' -bench . -benchtime 2s ./pkg/gale/federation/redisfed/
func BenchmarkCoordinatorLease(b *testing.B) {
	c, _ := newCoordinator(b, redisstore.Options{})
	now := time.Now()
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			var id atomic.Int64
			parallel(b, callers, func() func() {
				key := fmt.Sprintf("bench/lease/%d", id.Add(1))
				return func() {
					if g, err := c.Lease(ctx, key, benchRule, 1, 1, now); err != nil || g.Granted != 1 {
						b.Fatalf("%+v, %v", g, err)
					}
				}
			})
		})
	}
}

// BenchmarkCoordinatorReconcile measures reconciles, each with a new token
// (applied: the marker set and a unit given back), one caller.
func BenchmarkCoordinatorReconcile(b *testing.B) {
	c, _ := newCoordinator(b, redisstore.Options{})
	now := time.Now()
	g, err := c.Lease(ctx, "bench/reconcile", benchRule, 1<<30, 1<<30, now)
	if err != nil || g.Granted == 0 {
		b.Fatalf("%+v, %v", g, err)
	}
	rec := federation.Reconcile{Leftover: 1, WindowEnd: g.WindowEnd, Now: now}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec.Token = strconv.Itoa(i)
		if got, err := c.Reconcile(ctx, "bench/reconcile", benchRule, rec); err != nil || got != federation.Applied {
			b.Fatalf("%v, %v", got, err)
		}
	}
}

// BenchmarkEscrowTake measures takes of one unit from a live balance, from
// 1 and 16 concurrent callers on one key (one region's processes).
func BenchmarkEscrowTake(b *testing.B) {
	e, _ := newEscrow(b, redisfed.EscrowOptions{})
	now := time.Now()
	w := federation.Window{End: now.Add(time.Hour), TTL: time.Hour}
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			key := fmt.Sprintf("bench/take/%d", callers)
			if _, err := e.Refill(ctx, key, gale.MaxLimit, w, now); err != nil {
				b.Fatal(err)
			}
			parallel(b, callers, func() func() {
				return func() {
					if h, err := e.Take(ctx, key, 1, 1, now); err != nil || h.Granted != 1 {
						b.Fatalf("%+v, %v", h, err)
					}
				}
			})
		})
	}
}

// BenchmarkEscrowRefill measures refills joining a live balance of their
// window, one caller.
func BenchmarkEscrowRefill(b *testing.B) {
	e, _ := newEscrow(b, redisfed.EscrowOptions{})
	now := time.Now()
	w := federation.Window{End: now.Add(time.Hour), TTL: time.Hour}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n, err := e.Refill(ctx, "bench/refill", 1, w, now); err != nil || n != 1 {
			b.Fatalf("%d, %v", n, err)
		}
	}
}

// parallel runs b.N operations from callers goroutines, each running the
// operation newOp makes for it.
func parallel(b *testing.B, callers int, newOp func() func()) {
	newOp()() // warm up: cache the script
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		op := newOp()
		for i := 0; i < b.N; i++ {
			op()
		}
		return
	}
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((callers + procs - 1) / procs)
	b.RunParallel(func(pb *testing.PB) {
		op := newOp()
		for pb.Next() {
			op()
		}
	})
}
