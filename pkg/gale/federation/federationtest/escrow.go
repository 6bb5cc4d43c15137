package federationtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// RunEscrow runs the Escrow contract against the escrow newEscrow returns.
// Each subtest uses its own keys, so newEscrow may return one shared escrow.
func RunEscrow(t *testing.T, newEscrow func(t *testing.T) federation.Escrow) {
	cases := []struct {
		name string
		run  func(h *escrowHarness)
	}{
		{"TakesWhatTheBalanceHolds", takesWhatItHolds},
		{"RefillAddsWithinAWindowAndDropsStaleGrants", refillWithinWindow},
		{"ABalanceDiesAtItsWindowEndAndIsReleasedOnce", diesAndReleasesOnce},
		{"JoinOnlyRefillNeverStartsABalance", joinOnly},
		{"ABalanceLivesFromTheTakeBeforeItsLease", livesFromSince},
		{"InvalidArguments", escrowArgs},
		{"LongKeysHaveTheirOwnBalances", escrowLongKeys},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(&escrowHarness{t: t, e: newEscrow(t), key: fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()), now: storetest.Timeline()})
		})
	}
	t.Run("ConcurrentTakesTakeExactlyTheBalance", func(t *testing.T) { concurrentTakes(t, newEscrow(t)) })
}

type escrowHarness struct {
	t   *testing.T
	e   federation.Escrow
	key string
	now time.Time
}

func (h *escrowHarness) window(d time.Duration) federation.Window {
	return federation.Window{End: h.now.Add(d), TTL: d}
}

func (h *escrowHarness) take(min, max int64) federation.Held {
	h.t.Helper()
	got, err := h.e.Take(context.Background(), h.key, min, max, h.now)
	if err != nil {
		h.t.Fatalf("Take(%d..%d): %v", min, max, err)
	}
	return got
}

func (h *escrowHarness) refill(n int64, w federation.Window) int64 {
	h.t.Helper()
	got, err := h.e.Refill(context.Background(), h.key, n, w, h.now)
	if err != nil {
		h.t.Fatalf("Refill(%d, %+v): %v", n, w, err)
	}
	return got
}

func (h *escrowHarness) release(end time.Time) int64 {
	h.t.Helper()
	got, err := h.e.Release(context.Background(), h.key, end, h.now)
	if err != nil {
		h.t.Fatalf("Release(%v): %v", end, err)
	}
	return got
}

func takesWhatItHolds(h *escrowHarness) {
	if got := h.take(1, 5); !nothing(got, h.now) {
		h.t.Fatalf("take from nothing: %+v, want nothing but the take's clock", got)
	}
	w := h.window(time.Minute)
	h.refill(7, w)
	got := h.take(1, 5)
	if got.Granted != 5 || got.Balance != 2 || !got.Window.End.Equal(w.End) || got.Window.TTL != time.Minute {
		h.t.Fatalf("take 1..5 of 7: %+v, want 5 taken, 2 left, the window ending %v living a minute", got, w.End)
	}
	if got := h.take(3, 3); got.Granted != 0 || got.Balance != 2 {
		h.t.Fatalf("take 3 of 2: %+v, want nothing taken, 2 left", got)
	}
	h.now = h.now.Add(10 * time.Second)
	if got := h.take(1, 5); got.Granted != 2 || got.Balance != 0 || got.Window.TTL != 50*time.Second {
		h.t.Fatalf("take 1..5 of 2 ten seconds on: %+v, want 2 taken, TTL 50s", got)
	}
}

func refillWithinWindow(h *escrowHarness) {
	w := h.window(time.Minute)
	h.refill(3, w)
	if got := h.refill(4, federation.Window{End: w.End, TTL: time.Minute}); got != 4 {
		h.t.Fatalf("refill of the same window added %d, want 4", got)
	}
	if got := h.refill(9, federation.Window{End: w.End.Add(-time.Minute), TTL: time.Second}); got != 0 {
		h.t.Fatalf("a stale grant (an older window) added %d, want 0", got)
	}
	if got := h.take(1, 100); got.Granted != 7 {
		h.t.Fatalf("take after refills of 3 and 4 and a stale 9: %d, want 7", got.Granted)
	}
}

func diesAndReleasesOnce(h *escrowHarness) {
	w := h.window(time.Minute)
	h.refill(6, w)
	h.take(2, 2)
	h.now = h.now.Add(time.Minute)
	got := h.take(1, 1)
	if got.Granted != 0 || !got.Dead.Equal(w.End) {
		h.t.Fatalf("take at the window end: %+v, want nothing, and the dead balance of %v named", got, w.End)
	}
	if n := h.release(w.End); n != 4 {
		h.t.Fatalf("first release captured %d, want the 4 left", n)
	}
	if n := h.release(w.End); n != 0 {
		h.t.Fatalf("second release captured %d, want 0 (the first releaser wins)", n)
	}
	if got := h.take(1, 1); !nothing(got, h.now) {
		h.t.Fatalf("take after the release: %+v, want nothing but the take's clock", got)
	}
	// A refill of the next window replaces a dead balance never released.
	w2 := h.window(time.Minute)
	h.refill(5, w2)
	h.now = h.now.Add(time.Minute)
	w3 := h.window(time.Minute)
	if got := h.refill(2, w3); got != 2 {
		h.t.Fatalf("refill over a dead balance added %d, want 2", got)
	}
	if got := h.take(1, 10); got.Granted != 2 {
		h.t.Fatalf("take after a refill over a dead balance of 5: %d, want 2 (the dead units never come back)", got.Granted)
	}
}

func joinOnly(h *escrowHarness) {
	w := h.window(time.Minute)
	if got := h.refill(3, federation.Window{End: w.End}); got != 0 {
		h.t.Fatalf("join-only refill with no balance added %d, want 0", got)
	}
	h.refill(1, w)
	if got := h.refill(3, federation.Window{End: w.End}); got != 3 {
		h.t.Fatalf("join-only refill of the live window added %d, want 3", got)
	}
	if got := h.refill(3, federation.Window{End: w.End.Add(time.Minute)}); got != 0 {
		h.t.Fatalf("join-only refill of another window added %d, want 0", got)
	}
	if got := h.take(1, 10); got.Granted != 4 {
		h.t.Fatalf("take: %d, want 4", got.Granted)
	}
}

// livesFromSince: a grant's units live TTL from Since, the clock a take
// reported before the lease was sent, not from the refill: a refill that
// arrives late dies when the coordinator's window does, and one that
// arrives after it adds nothing.
func livesFromSince(h *escrowHarness) {
	took := h.take(1, 1).Now
	if !took.Equal(h.now) {
		h.t.Fatalf("take reported its clock as %v, want %v (the now passed)", took, h.now)
	}
	end := h.now.Add(time.Second)
	h.now = h.now.Add(300 * time.Millisecond) // the coordinator's reply took 300 ms
	if got := h.refill(5, federation.Window{End: end, TTL: time.Second, Since: took}); got != 5 {
		h.t.Fatalf("refill 300 ms after the take added %d, want 5", got)
	}
	h.now = took.Add(999 * time.Millisecond)
	if got := h.take(1, 1); got.Granted != 1 || got.Window.TTL != time.Millisecond {
		h.t.Fatalf("take 1 ms before the window ends: %+v, want 1 taken with 1 ms to live", got)
	}
	h.now = took.Add(time.Second)
	if got := h.take(1, 1); got.Granted != 0 || !got.Dead.Equal(end) {
		h.t.Fatalf("take at the window's end: %+v, want nothing and the dead balance named (it lived past its window)", got)
	}
	h.release(end)
	end2 := h.now.Add(time.Second)
	took = h.take(1, 1).Now
	h.now = h.now.Add(time.Second)
	if got := h.refill(5, federation.Window{End: end2, TTL: time.Second, Since: took}); got != 0 {
		h.t.Fatalf("a refill arriving after its window ended added %d, want 0 (dead on arrival)", got)
	}
	if got := h.take(1, 1); !nothing(got, h.now) {
		h.t.Fatalf("take after a refill dead on arrival: %+v, want nothing", got)
	}
}

// nothing reports whether h is a take that found nothing, at now.
func nothing(h federation.Held, now time.Time) bool {
	return h.Granted == 0 && h.Balance == 0 && h.Window == (federation.Window{}) && h.Dead.IsZero() && h.Now.Equal(now)
}

func escrowArgs(h *escrowHarness) {
	ctx := context.Background()
	for _, mm := range [][2]int64{{0, 1}, {2, 1}, {1, 1 << 41}} {
		if _, err := h.e.Take(ctx, h.key, mm[0], mm[1], h.now); !errors.Is(err, federation.ErrEscrowArgs) {
			h.t.Errorf("Take(%d..%d): %v, want ErrEscrowArgs", mm[0], mm[1], err)
		}
	}
	bad := []federation.Window{{End: h.now.Add(time.Minute), TTL: -time.Second}, {TTL: time.Second}}
	for _, w := range bad {
		if _, err := h.e.Refill(ctx, h.key, 1, w, h.now); !errors.Is(err, federation.ErrEscrowArgs) {
			h.t.Errorf("Refill(1, %+v): %v, want ErrEscrowArgs", w, err)
		}
	}
	if _, err := h.e.Refill(ctx, h.key, 0, h.window(time.Minute), h.now); !errors.Is(err, federation.ErrEscrowArgs) {
		h.t.Errorf("Refill(0): %v, want ErrEscrowArgs", err)
	}
}

func concurrentTakes(t *testing.T, e federation.Escrow) {
	key, now := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()), storetest.Timeline()
	if _, err := e.Refill(context.Background(), key, 100, federation.Window{End: now.Add(time.Hour), TTL: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	got := hammer(t, func() (int64, error) {
		h, err := e.Take(context.Background(), key, 1, 3, now)
		return h.Granted, err
	})
	if got != 100 {
		t.Fatalf("16 processes taking 1..3 concurrently took %d of a balance of 100, want exactly 100", got)
	}
}
