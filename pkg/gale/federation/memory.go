package federation

import (
	"context"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// MemoryCoordinator is a Coordinator in this process's memory: for tests,
// the model's reference, and one host running several regions. Its budgets
// are a memstore (the pure strategies of package gale under a lock per
// shard); its reconcile markers sit beside them under one lock. The zero
// value is not usable; call NewMemoryCoordinator. It is safe for
// concurrent use.
type MemoryCoordinator struct {
	clock   func() time.Time // nil: the callers' now
	budgets *memstore.Store

	mu    sync.Mutex
	marks map[markKey]int64 // reconcile markers → the Unix µs they lapse at
	ops   int
}

type markKey struct {
	key       string
	windowEnd int64
	token     string
}

var _ Coordinator = (*MemoryCoordinator)(nil)

// NewMemoryCoordinator returns an empty coordinator. With clock nil it reads
// the now each call passes (fake-clock tests); otherwise it reads clock,
// as a coordinator on its own clock does, and reports it in Grant.Now.
func NewMemoryCoordinator(clock func() time.Time) *MemoryCoordinator {
	return &MemoryCoordinator{clock: clock, budgets: memstore.New(), marks: make(map[markKey]int64)}
}

func (c *MemoryCoordinator) now(callers time.Time) time.Time {
	if c.clock != nil {
		return c.clock()
	}
	return callers
}

// Lease takes between min and max units of key's budget.
func (c *MemoryCoordinator) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	if err := CheckRule(rule); err != nil {
		return gale.Grant{}, err
	}
	return c.budgets.Lease(ctx, key, rule, min, max, c.now(now))
}

// Reconcile gives back unused units once per (key, WindowEnd, Token).
func (c *MemoryCoordinator) Reconcile(ctx context.Context, key string, rule gale.Rule, rec Reconcile) (Reconciled, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := CheckReconcile(rule, rec); err != nil {
		return 0, err
	}
	now := c.now(rec.Now)
	us, we := now.UnixMicro(), rec.WindowEnd.UnixMicro()
	c.mu.Lock()
	defer c.mu.Unlock()
	mk := markKey{key, we, rec.Token}
	if lapse, ok := c.marks[mk]; ok && lapse > us {
		return Duplicate, nil
	}
	if we <= us {
		return Expired, nil // nothing to give back to; a marker would lapse at once
	}
	c.marks[mk] = we
	c.sweep(us)
	// Under c.mu: a concurrent copy of this reconcile finds the marker.
	if err := c.budgets.Return(ctx, key, rule, rec.Leftover, rec.WindowEnd, now); err != nil {
		return 0, err
	}
	return Applied, nil
}

// Healthy returns nil: memory always answers.
func (c *MemoryCoordinator) Healthy(ctx context.Context) error { return ctx.Err() }

// sweep forgets lapsed markers, every so many reconciles (amortised O(1)).
// Called with c.mu held.
func (c *MemoryCoordinator) sweep(now int64) {
	c.ops++
	if c.ops < max(4096, len(c.marks)) {
		return
	}
	c.ops = 0
	for k, lapse := range c.marks {
		if lapse <= now {
			delete(c.marks, k)
		}
	}
}

// MemoryEscrow is an Escrow in this process's memory: for tests and the
// model. The zero value is not usable; call NewMemoryEscrow. It is safe for
// concurrent use.
type MemoryEscrow struct {
	mu   sync.Mutex
	keys map[string]*memBalance
}

type memBalance struct {
	windowEnd time.Time // the coordinator window's name
	dies      time.Time // on the callers' clock
	units     int64
}

var _ Escrow = (*MemoryEscrow)(nil)

// NewMemoryEscrow returns an empty escrow. Its balances die on the callers'
// clock: every caller must pass the same clock's now.
func NewMemoryEscrow() *MemoryEscrow {
	return &MemoryEscrow{keys: make(map[string]*memBalance)}
}

// Take takes between min and max units of key's live balance.
func (e *MemoryEscrow) Take(ctx context.Context, key string, lo, hi int64, now time.Time) (Held, error) {
	if err := ctx.Err(); err != nil {
		return Held{}, err
	}
	if lo < 1 || hi < lo || hi > gale.MaxLimit {
		return Held{}, ErrEscrowArgs
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.keys[key]
	if b == nil {
		return Held{Now: now}, nil
	}
	if !now.Before(b.dies) {
		if b.units == 0 {
			delete(e.keys, key)
			return Held{Now: now}, nil
		}
		return Held{Dead: b.windowEnd, Now: now}, nil
	}
	h := Held{Window: Window{End: b.windowEnd, TTL: b.dies.Sub(now)}, Now: now}
	if b.units >= lo {
		h.Granted = min(b.units, hi)
		b.units -= h.Granted
	}
	h.Balance = b.units
	return h, nil
}

// Refill adds n units of window w to key's balance.
func (e *MemoryEscrow) Refill(ctx context.Context, key string, n int64, w Window, now time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if n < 1 || n > gale.MaxLimit || w.TTL < 0 || w.End.IsZero() {
		return 0, ErrEscrowArgs
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	since := w.Since
	if since.IsZero() {
		since = now
	}
	// Whole microseconds, down, as the Redis escrow counts: the grant's
	// TTL is from a Grant.Now the coordinator rounded down to the
	// microsecond, so a Since to the nanosecond let a balance outlive its
	// window by up to a microsecond (internal/boundcheck, seed 1281).
	since, ttl := since.Truncate(time.Microsecond), w.TTL.Truncate(time.Microsecond)
	b := e.keys[key]
	switch {
	case w.TTL == 0 && (b == nil || !now.Before(b.dies) || !b.windowEnd.Equal(w.End)):
		return 0, nil // join only, and no live balance of w's window to join
	case w.TTL > 0 && !now.Before(since.Add(ttl)):
		return 0, nil // dead on arrival: the window is over on this clock
	case b == nil:
		b = &memBalance{}
		e.keys[key] = b
	case now.Before(b.dies) && b.windowEnd.After(w.End):
		return 0, nil // a stale grant: the live balance is of a later window
	case now.Before(b.dies) && b.windowEnd.Equal(w.End):
		b.units = min(b.units+n, gale.MaxLimit)
		return n, nil
	}
	b.windowEnd, b.dies, b.units = w.End, since.Add(ttl), n
	return n, nil
}

// Release captures and zeroes key's balance of the window ending at
// windowEnd.
func (e *MemoryEscrow) Release(ctx context.Context, key string, windowEnd time.Time, now time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.keys[key]
	if b == nil || !b.windowEnd.Equal(windowEnd) {
		return 0, nil
	}
	n := b.units
	delete(e.keys, key)
	return n, nil
}
