package federation

import (
	"context"
	"errors"
	"time"
)

// Escrow is a region's shared balance (L2): the units its processes leased
// from the coordinator and have not yet taken, so that several processes of
// one region hold one balance per key, not one batch each. Implementations
// MUST be safe for concurrent use by every process of the region, MUST make
// each operation atomic for its key, and MUST pass the federationtest escrow
// suite.
//
// A balance is of one coordinator window, named by its end on the
// coordinator's clock (a Grant's WindowEnd), and lives no longer than that
// window. Refill states its life on the escrow's own clock, so that no two
// clocks need agree on an instant: TTL from Since, an instant of the
// escrow's clock that a Take reported (Held.Now) before the lease was sent
// to the coordinator (RegionMachine.Split says why). A balance whose
// deadline has passed is dead: Take never serves it (window coupling),
// Refill replaces it, and Release captures it once.
type Escrow interface {
	// Take takes between min and max units of key's live balance, as many as
	// it holds up to max, or none when it holds fewer than min.
	Take(ctx context.Context, key string, min, max int64, now time.Time) (Held, error)
	// Refill adds n units granted in window w to key's balance: to a live
	// balance of the same window; in place of a dead one or none (whose
	// leftover is then lost: Release it first to reconcile it). A grant of
	// an older window than the live balance's is stale and dropped, and so
	// is one already dead on arrival (w.Since + w.TTL not after the
	// escrow's now). With w.TTL 0 it only joins a live balance of w's
	// window, never starting one (units given back by a process, whose
	// time to live it does not know). It returns the units added.
	Refill(ctx context.Context, key string, n int64, w Window, now time.Time) (int64, error)
	// Release captures and zeroes key's balance of the window ending at
	// windowEnd, dead or alive, and returns it: the leftover to reconcile.
	// The first release of a balance captures it; later ones capture 0.
	Release(ctx context.Context, key string, windowEnd time.Time, now time.Time) (int64, error)
}

// Window names a coordinator window and how long its units live.
type Window struct {
	// End is the window's end on the coordinator's clock (Grant.WindowEnd):
	// the window's name.
	End time.Time
	// TTL is how long from Since the window's units live: at most the time
	// that was left until End when the coordinator granted them.
	TTL time.Duration
	// Since is the instant, on the escrow's clock, TTL runs from: a Held.Now
	// taken before the lease whose units these are was sent. Zero means the
	// refill's own instant (a caller that cannot know better: the units
	// then outlive their window by however long reached the escrow took).
	Since time.Time
}

// Held is what a Take found.
type Held struct {
	// Granted is the units taken: 0, or between the request's min and max.
	Granted int64
	// Window is the live balance's window, its TTL from the call; the zero
	// Window when no balance lives.
	Window Window
	// Balance is what the live balance holds after the take.
	Balance int64
	// Dead names a dead balance with units left (its window's End), for
	// the caller to Release and reconcile; the zero time when none.
	Dead time.Time
	// Now is the escrow's clock at the take (the now passed, for an escrow
	// on its callers' clock): the Since of a refill of units leased after
	// it.
	Now time.Time
}

// ErrEscrowArgs is returned for a take's min and max, or a refill's n or
// TTL, out of range (1 ≤ min ≤ max ≤ gale.MaxLimit; 1 ≤ n ≤ gale.MaxLimit;
// TTL ≥ 0; a non-zero window end).
var ErrEscrowArgs = errors.New("federation: escrow arguments out of range")
