package federationtest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// LongKey is the length, in bytes, of the long keys the suites use: past
// the longest key the engine hands a coordinator (135,591 bytes: a
// 256-byte domain, the rule's fingerprint and 16 entries of a 256-byte key
// and an 8 KiB value, each length-prefixed; pkg/engine's
// TestLongestKeyFitsTheSuites holds the two together).
const LongKey = 136 << 10

// LongKeys returns three distinct keys of about LongKey bytes that start
// with prefix: the second differs from the first in its last byte only,
// and the third is the first less its last byte. Past prefix they are
// random bytes, so a backend cannot compress them into an index that
// refuses them whole.
func LongKeys(prefix string) [3]string {
	rng := rand.New(rand.NewPCG(uint64(len(prefix)), 0x5eed))
	b := make([]byte, max(LongKey, len(prefix)+2))
	copy(b, prefix)
	for i := len(prefix); i < len(b); i++ {
		b[i] = byte(rng.Uint32())
	}
	a := string(b)
	b[len(b)-1]++
	return [3]string{a, string(b), a[:len(a)-1]}
}

// longKeys: keys as long as the engine's longest lease and reconcile like
// any other, and keys sharing all but their last byte, or one a prefix of
// the other, share neither a budget nor a reconcile marker.
func longKeys(t *testing.T, c federation.Coordinator, key string, t0 time.Time) {
	keys := LongKeys(key)
	for i, k := range keys {
		if g := lease(t, c, k, perMinute, 10, 10, t0); g.Granted != 10 {
			t.Fatalf("long key %d (%d bytes): granted %d, want the whole limit, 10 (its own budget)", i, len(k), g.Granted)
		}
	}
	for i, k := range keys {
		if g := lease(t, c, k, perMinute, 1, 1, t0); g.Granted != 0 {
			t.Fatalf("long key %d: granted %d past the limit", i, g.Granted)
		}
	}
	end := t0.Add(time.Minute)
	for i, k := range keys {
		rec := federation.Reconcile{Leftover: int64(i + 2), WindowEnd: end, Token: "eu", Now: t0.Add(time.Second)}
		if got := reconcile(t, c, k, perMinute, rec); got != federation.Applied {
			t.Fatalf("long key %d: reconcile %v, want applied (its own marker)", i, got)
		}
		if got := reconcile(t, c, k, perMinute, rec); got != federation.Duplicate {
			t.Fatalf("long key %d: retried reconcile %v, want duplicate", i, got)
		}
	}
	for i, k := range keys {
		if g := lease(t, c, k, perMinute, 1, 10, t0.Add(2*time.Second)); g.Granted != int64(i+2) {
			t.Fatalf("long key %d: granted %d after its reconcile of %d", i, g.Granted, i+2)
		}
	}
}

// escrowLongKeys: keys as long as the engine's longest hold a balance like
// any other, each its own.
func escrowLongKeys(h *escrowHarness) {
	ctx, w := context.Background(), h.window(time.Minute)
	keys := LongKeys(h.key)
	for i, k := range keys {
		if n, err := h.e.Refill(ctx, k, int64(i+2), w, h.now); err != nil || n != int64(i+2) {
			h.t.Fatalf("long key %d (%d bytes): refill %d, %v; want %d added", i, len(k), n, err, i+2)
		}
	}
	for i, k := range keys {
		if got, err := h.e.Take(ctx, k, 1, int64(i+1), h.now); err != nil || got.Granted != int64(i+1) || got.Balance != 1 {
			h.t.Fatalf("long key %d: take 1..%d %+v, %v; want %d taken of its own %d, 1 left", i, i+1, got, err, i+1, i+2)
		}
	}
	h.now = h.now.Add(time.Minute)
	for i, k := range keys {
		if n, err := h.e.Release(ctx, k, w.End, h.now); err != nil || n != 1 {
			h.t.Fatalf("long key %d: release captured %d, %v; want its 1 left", i, n, err)
		}
	}
}
