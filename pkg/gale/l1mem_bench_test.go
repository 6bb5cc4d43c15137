package gale_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// l1Keys is how many keys BenchmarkL1BytesPerKey puts in L1: the size the
// key-flood figures (test/e2e's TestE2EKeyFlood) are scaled from.
const l1Keys = 1_000_000

// BenchmarkL1BytesPerKey measures the heap L1 holds per leased key at 1M
// keys: each iteration fills a fresh leased limiter (MaxKeys 2^20, so nothing
// is evicted) with l1Keys distinct keys of the length given in the
// sub-benchmark's name, one check each, and reports the live heap it grew by,
// after a GC, divided by the keys (B/key). The store keeps nothing per key
// (freeStore), so the figure is L1's alone: the entry, its KeyState, the key
// string and the shard map's slot. The store's own cost per key — Redis's,
// in another process — is not in it.
func BenchmarkL1BytesPerKey(b *testing.B) {
	for _, keyLen := range []int{16, 48} {
		b.Run(fmt.Sprintf("key=%dB", keyLen), func(b *testing.B) {
			keys := make([][]byte, l1Keys)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "%0*d", keyLen, i)
			}
			var perKey float64
			for b.Loop() {
				perKey = l1BytesPerKey(b, keys)
			}
			b.ReportMetric(perKey, "B/key")
		})
	}
}

// l1BytesPerKey fills a new leased limiter with keys and returns the heap
// it holds per key. The keys are checked through CheckBytes, the engine's
// path, so L1 holds its own copy of each key as the sidecar's does (the
// caller's bytes were allocated before the first reading).
func l1BytesPerKey(b *testing.B, keys [][]byte) float64 {
	b.Helper()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1000, Period: time.Hour}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l, err := gale.New(freeStore{}, gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 10}, MaxKeys: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	now := start.Add(time.Minute)
	for _, k := range keys {
		if d, err := l.CheckBytes(bg, k, 1, now); err != nil || !d.Allowed {
			b.Fatalf("Check(%q): %+v %v", k, d, err)
		}
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	if err := l.Settle(ctx); err != nil {
		b.Fatalf("leases still in flight after a minute: %+v", l.Stats())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := l.Stats()
	if st.Keys != int64(len(keys)) || st.Evictions != 0 {
		b.Fatalf("L1 holds %d keys after %d evictions, want %d and none", st.Keys, st.Evictions, len(keys))
	}
	perKey := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(len(keys))
	runtime.KeepAlive(l)
	if err := l.Close(bg); err != nil {
		b.Fatal(err)
	}
	return perKey
}

// freeStore grants every lease in full and keeps nothing: a Store whose
// memory does not grow with the keys, so that what grows is L1. It counts
// no window (it would over-admit anywhere but here).
type freeStore struct{}

func (freeStore) Check(_ context.Context, _ string, r gale.Rule, cost int64, _ time.Time) (gale.Decision, error) {
	return gale.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit - cost}, nil
}

func (freeStore) Lease(_ context.Context, _ string, r gale.Rule, _, max int64, now time.Time) (gale.Grant, error) {
	_, end := r.WindowBounds(now.UnixMicro())
	return gale.Grant{Granted: max, Now: now, WindowEnd: time.UnixMicro(end),
		Decision: gale.Decision{Allowed: true, Limit: r.Limit, Remaining: r.Limit - max, ResetAt: time.UnixMicro(end)}}, nil
}

func (freeStore) Charge(_ context.Context, _ string, r gale.Rule, _ int64, _ time.Time) (gale.Decision, error) {
	return gale.Decision{Allowed: true, Limit: r.Limit}, nil
}

func (freeStore) Return(context.Context, string, gale.Rule, int64, time.Time, time.Time) error {
	return nil
}
