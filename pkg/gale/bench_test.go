package gale_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// hugeRule never runs out inside a benchmark, so every check after the first
// lease is a local hit.
var hugeRule = gale.Rule{Algorithm: gale.FixedWindow, Limit: gale.MaxLimit, Period: time.Hour}

// BenchmarkLeasedLocalHit is the leased fast path: a check served from local
// credits, no store call.
func BenchmarkLeasedLocalHit(b *testing.B) {
	l := newLimiter(b, memstore.New(), gale.Config{Rule: hugeRule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 1 << 38}})
	now := start.Add(time.Minute)
	mustCheck(b, l, "user:42", 1, now)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.Check(bg, "user:42", 1, now); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkLeasedParallelDistinctKeys: every goroutine checks its own keys.
func BenchmarkLeasedParallelDistinctKeys(b *testing.B) {
	l := newLimiter(b, memstore.New(), gale.Config{Rule: hugeRule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 1 << 30}})
	now := start.Add(time.Minute)
	const perG = 64
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		keys := make([]string, perG)
		for i := range keys {
			keys[i] = fmt.Sprintf("tenant:%d:user:%d", g, i)
		}
		i := 0
		for pb.Next() {
			if d, err := l.Check(bg, keys[i%perG], 1, now); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			i++
		}
	})
}

// BenchmarkCachedDenyHit: a denied key flooding, answered from L1.
func BenchmarkCachedDenyHit(b *testing.B) {
	l := newLimiter(b, memstore.New(), gale.Config{Rule: perMinute(1), Mode: gale.CachedDeny})
	now := start.Add(time.Second)
	mustCheck(b, l, "k", 1, now)
	mustCheck(b, l, "k", 1, now)
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := l.Check(bg, "k", 1, now); d.Allowed {
			b.Fatal("allowed")
		}
	}
}

// BenchmarkStrictMemory: strict mode on the in-memory store.
func BenchmarkStrictMemory(b *testing.B) {
	l := newLimiter(b, memstore.New(), gale.Config{Rule: hugeRule})
	now := start.Add(time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.Check(bg, "k", 1, now); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}

// BenchmarkLeasedLocalHitBytes is LeasedLocalHit through CheckBytes, the
// engine's path: a key L1 holds costs no string.
func BenchmarkLeasedLocalHitBytes(b *testing.B) {
	l := newLimiter(b, memstore.New(), gale.Config{Rule: hugeRule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 1 << 38}})
	now := start.Add(time.Minute)
	key := []byte("user:42")
	mustCheck(b, l, "user:42", 1, now)
	b.ReportAllocs()
	for b.Loop() {
		if d, err := l.CheckBytes(bg, key, 1, now); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
}
