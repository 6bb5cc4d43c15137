package redisfed

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// Coordinator is a federation.Coordinator on Redis: a redisstore.Store
// whose Lease grants and whose ReturnOnce reconciles (see the package
// comment). Create it with NewCoordinator or CoordinatorOn; the zero value
// is not usable. It is safe for concurrent use by any number of regions and
// processes.
type Coordinator struct {
	store *redisstore.Store
	owned bool // Close closes store
}

var _ federation.Coordinator = (*Coordinator)(nil)

// NewCoordinator returns a Coordinator on a Store of its own, made with
// redisstore.New(client, opts); Close closes that store. opts.ServerTime is
// the production setting (see the package comment). The client stays the
// caller's.
func NewCoordinator(client redis.UniversalClient, opts redisstore.Options) (*Coordinator, error) {
	s, err := redisstore.New(client, opts)
	if err != nil {
		return nil, fmt.Errorf("redisfed: %w", err)
	}
	return &Coordinator{store: s, owned: true}, nil
}

// CoordinatorOn returns a Coordinator on store, which stays the caller's:
// Close leaves it open. Its budgets are the store's state hashes, so a key
// must not be both federated and limited directly through the same store.
func CoordinatorOn(store *redisstore.Store) *Coordinator {
	if store == nil {
		panic("redisfed: CoordinatorOn(nil)")
	}
	return &Coordinator{store: store}
}

// Close closes the store NewCoordinator made (see redisstore.Store.Close);
// for a Coordinator made by CoordinatorOn it does nothing. It is safe to
// call more than once.
func (c *Coordinator) Close() error {
	if c.owned {
		return c.store.Close()
	}
	return nil
}

// Lease takes between min and max units of key's budget under rule, as
// redisstore.Store.Lease does: its script writes the budget with PEXPIREAT
// at the state's expiry — the window's end, where the granted units die (a
// sliding window's one period later, as it counts into the next). now is
// ignored under
// ServerTime, and Grant.Now is Redis's time. Any key is accepted, however
// long: Redis names take up to 512 MB. It returns an error wrapping
// federation.ErrNotWindowed for GCRA and the token bucket, and otherwise the
// store's errors, wrapping federation.ErrRefused as well when Redis refused
// this request itself (WRONGTYPE, CROSSSLOT, an error in the script: see
// refusedReply).
func (c *Coordinator) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	if err := ctx.Err(); err != nil {
		return gale.Grant{}, err
	}
	if err := federation.CheckRule(rule); err != nil {
		return gale.Grant{}, err
	}
	g, err := c.store.Lease(ctx, key, rule, min, max, now)
	return g, refusal(err)
}

// Reconcile gives rec.Leftover units back to the window ending at
// rec.WindowEnd, once per (key, WindowEnd, Token), in one script
// (redisstore.Store.ReturnOnce): Duplicate when the token's marker is live,
// Expired when the window has ended (on rec.Now, or Redis's time under
// ServerTime), and otherwise Applied, the marker set to lapse at the
// window's end. It returns federation.ErrToken, federation.ErrNotWindowed
// and the store's errors, wrapping federation.ErrRefused as Lease's do.
func (c *Coordinator) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := federation.CheckReconcile(rule, rec); err != nil {
		return 0, err
	}
	res, err := c.store.ReturnOnce(ctx, key, rule, rec.Leftover, rec.WindowEnd, rec.Token, rec.Now)
	if err != nil {
		return 0, refusal(err)
	}
	switch res {
	case redisstore.ReturnApplied:
		return federation.Applied, nil
	case redisstore.ReturnDuplicate:
		return federation.Duplicate, nil
	}
	return federation.Expired, nil // ReturnOnce answers one of three
}

// Healthy returns nil when Redis answers a PING within ctx and the store's
// Timeout.
func (c *Coordinator) Healthy(ctx context.Context) error { return c.store.Ping(ctx) }
