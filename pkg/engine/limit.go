package engine

import (
	"context"
	"errors"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// limit answers the checks of one rule for any number of counter keys: a
// *gale.Limiter for policy rules and for the limits requests carry
// (overrides), a *fairRule for a rule shared fairly among tenants. The engine
// asks every rule through it and builds every status from the Decision it
// returns. Implementations are safe for concurrent use.
type limit interface {
	// Check asks whether cost units of key may be admitted at now. A store
	// failure is answered by the rule's on_store_error (a Decision with
	// Fallback set) or returned wrapping gale.ErrStore; a caller whose ctx
	// ended gets ctx.Err().
	Check(ctx context.Context, key string, cost int64, now time.Time) (gale.Decision, error)
	// CheckBytes is Check for a key in bytes, which it does not keep.
	CheckBytes(ctx context.Context, key []byte, cost int64, now time.Time) (gale.Decision, error)
	// Refund gives back cost units Check admitted with decision d, to the
	// window d.WindowEnd names and to no other. A limit that cannot give
	// admitted units back returns errNoRefund.
	Refund(ctx context.Context, key string, cost int64, d gale.Decision, now time.Time) error
	// Charge counts n ≥ 0 units of key at now in full, even past the
	// limit, and answers whether they fit; n = 0 counts nothing (check
	// only). A charge is never refunded. Failures as Check's.
	Charge(ctx context.Context, key string, n int64, now time.Time) (gale.Decision, error)
	// ChargeBytes is Charge for a key in bytes, which it does not keep.
	ChargeBytes(ctx context.Context, key []byte, n int64, now time.Time) (gale.Decision, error)
	// GiveBack applies a negative hit: up to n units key consumed in the
	// window in place at now go back. It returns how many did.
	GiveBack(ctx context.Context, key string, n int64, now time.Time) (int64, error)
}

var (
	_ limit = (*gale.Limiter)(nil)
	_ limit = (*fairRule)(nil)
)

// errNoRefund is returned by the Refund of a limit that keeps what it
// admitted (a fair rule's escrow): nothing was given back, and nothing
// failed.
var errNoRefund = errors.New("engine: this limit keeps what it admitted")
