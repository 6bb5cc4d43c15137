package fair

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Shared is a weighted-fair escrow for one process of a fleet that shares a
// budget of Config.Limit units per window. It leases its budget lazily, in
// quanta, from a gale.FixedWindow counter with that Limit in a gale.Store,
// and decides fairness locally over the budget it can still reach: the units
// it has admitted and holds in the window plus what the store last said
// remains. The store's atomic Lease keeps the fleet's leases, and so its
// admissions, at or below Limit per window, for any number of processes.
// Leased credits die with the store window that granted them (window
// coupling): none carry over to the next window.
//
// Fairness is per process: each process splits what it obtains among the
// tenants it sees. Create a Shared with NewShared; the zero value is not
// usable. It is safe for concurrent use; decisions are serialized, and a
// decision that must lease holds the others back for the store's round trip
// (one per quantum of admissions at most).
type Shared struct {
	mu      sync.Mutex
	l       *ledger
	store   gale.Store
	key     string
	rule    gale.Rule
	quantum int64

	// window is the ledger window the credits below belong to.
	window time.Time
	// credits are leased units not yet admitted. Invariant: credits ≥ 0, and
	// credits = 0 from creditsEnd on.
	credits    int64
	creditsEnd time.Time // local time the credits die
	storeEnd   time.Time // the granting store window's end, on the store's clock
	// remote is what the store said remains after this process's latest
	// lease in the window; Limit before its first. It only overstates the
	// truth (nothing is returned to the store), so deciding over it never
	// denies a call the store would have granted.
	remote int64
}

// NewShared returns a Shared for cfg that leases from key in store in quanta
// of quantum units (at least 1; a call costing more leases its cost). The
// quantum trades store round trips (about admissions/quantum per window)
// against units stranded in a process when the window ends (under quantum per
// process). It returns an error wrapping ErrInvalidConfig for a config or
// quantum it cannot use.
func NewShared(cfg Config, store gale.Store, key string, quantum int64) (*Shared, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidConfig)
	}
	if quantum < 1 || quantum > c.limit {
		return nil, fmt.Errorf("%w: quantum %d, want 1..Limit (%d)", ErrInvalidConfig, quantum, c.limit)
	}
	return &Shared{
		l:       newLedger(c),
		store:   store,
		key:     key,
		rule:    gale.Rule{Algorithm: gale.FixedWindow, Limit: c.limit, Period: c.window},
		quantum: quantum,
	}, nil
}

// Decide admits cost units for tenant at now, or nothing, and says why,
// leasing from the store when the units it holds do not cover an admission.
// A store error (ctx's included) is returned, wrapped, with no units
// admitted (the call's demand still counts): the caller picks its failure
// policy. A cost below 1 is a caller's
// bug and panics.
func (s *Shared) Decide(ctx context.Context, tenant string, cost int64, now time.Time) (Decision, error) {
	if cost < 1 {
		panic(fmt.Sprintf("fair: Decide with cost %d, want ≥ 1", cost))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enterLocked(now)
	d, t := s.l.evaluate(tenant, cost, now, s.capacity())
	if !d.Allowed {
		return d, nil
	}
	if s.credits < cost {
		need := cost - s.credits
		at := s.storeTime(now)
		g, err := s.store.Lease(ctx, s.key, s.rule, need, max(s.quantum, need), at)
		if err != nil {
			return Decision{}, fmt.Errorf("fair: leasing %q: %w", s.key, err)
		}
		s.remote = g.Decision.Remaining
		if g.Granted == 0 {
			d.Allowed, d.Reason, d.Borrowed = false, ReasonCap, 0
			d.Remaining = s.capacity() - s.l.used
			return d, nil
		}
		if !g.WindowEnd.Equal(s.storeEnd) {
			// Credits of an older store window must not ride on this one.
			s.credits, s.storeEnd = 0, g.WindowEnd
		}
		s.credits += g.Granted
		// The store's instants are on its clock: carry the window's end over
		// to ours by its distance from the store's now.
		s.creditsEnd = s.l.end
		if end := at.Add(g.WindowEnd.Sub(g.Now)); end.Before(s.creditsEnd) {
			s.creditsEnd = end
		}
		if s.credits < cost {
			// The store window changed under the older credits and the grant
			// alone falls short: admit nothing, keep the grant.
			d.Allowed, d.Reason, d.Borrowed = false, ReasonCap, 0
			d.Remaining = s.capacity() - s.l.used
			return d, nil
		}
	}
	s.credits -= cost
	s.l.commit(t, cost, &d)
	d.Remaining = s.capacity() - s.l.used
	return d, nil
}

// Charge counts n ≥ 1 units for tenant at now in full, even past the
// limit: a cost already spent (the extra over a reservation, a charge of
// what a request cost), which the fleet must see. The units come from the
// credits this process holds, and the rest is charged to the store's
// counter, counted even past its limit (gale.Store.Charge). The decision
// is allowed when the units fit (the call would have been admitted:
// within the cap, the tenant's share and the others' claims, and the
// store's count); otherwise Overrun is the units counted past the limit
// (0 when only the tenant's share refused it).
// Either way the tenant's and the window's admissions grow by n, so what
// follows in the window sees the spend: a reservation that no longer fits
// is refused. A store error is returned, wrapped, with nothing counted (the
// call's demand still counts). An n below 1 is a caller's bug and panics.
func (s *Shared) Charge(ctx context.Context, tenant string, n int64, now time.Time) (Decision, error) {
	if n < 1 {
		panic(fmt.Sprintf("fair: Charge of %d units, want ≥ 1", n))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enterLocked(now)
	d, t := s.l.evaluate(tenant, n, now, s.capacity())
	fits := d.Allowed
	overrun := max(n-max(s.capacity()-s.l.used, 0), 0) // past the budget this process could reach
	from := min(s.credits, n)
	if rest := n - from; rest > 0 {
		sd, err := s.store.Charge(ctx, s.key, s.rule, rest, s.storeTime(now))
		if err != nil {
			return Decision{}, fmt.Errorf("fair: charging %q: %w", s.key, err)
		}
		s.remote = max(sd.Remaining, 0)
		if sd.Overrun > 0 {
			fits, overrun = false, max(overrun, sd.Overrun)
		}
	}
	s.credits -= from
	s.l.commit(t, n, &d)
	d.Allowed, d.Remaining = fits, max(s.capacity()-s.l.used, 0)
	if !fits {
		d.Borrowed = 0
		d.Overrun = min(overrun, n)
		if d.Reason == ReasonShare || d.Reason == ReasonBorrow {
			d.Reason = ReasonCap // the store's count was past the limit
		}
	}
	return d, nil
}

// enterLocked moves the escrow to the window holding now: a new window
// starts with no credits and the store's whole limit in view; credits past
// their end are gone.
func (s *Shared) enterLocked(now time.Time) {
	s.l.roll(now)
	if !s.window.Equal(s.l.end) {
		s.window, s.credits, s.remote = s.l.end, 0, s.l.cfg.limit
		s.creditsEnd, s.storeEnd = s.l.end, time.Time{}
	}
	if !now.Before(s.creditsEnd) {
		s.credits = 0
	}
}

// storeTime is the instant a store call at now is made at. A call stamped
// before the window (a clock stepping back, or calls reordered on their
// way in) is counted in the current window: the store is asked in it too,
// so the store's window and the ledger's agree.
func (s *Shared) storeTime(now time.Time) time.Time {
	if start := s.l.end.Add(-s.l.cfg.window); now.Before(start) {
		return start
	}
	return now
}

// capacity is the budget this process can still reach in the window.
func (s *Shared) capacity() int64 {
	return min(s.l.cfg.limit, s.l.used+s.credits+s.remote)
}

// Shares returns the weighted max-min fair share, in units, of each tenant
// this process tracks in the window of its latest decision, over the budget
// it could reach then. See Escrow.Shares.
func (s *Shared) Shares() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.shares()
}

// Admitted returns the units this process admitted to each tenant it tracks
// in the window of its latest decision.
func (s *Shared) Admitted() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.l.admitted()
}
