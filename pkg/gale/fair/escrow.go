package fair

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// ErrInvalidConfig is wrapped by every error New and NewShared return for a
// Config they cannot enforce.
var ErrInvalidConfig = errors.New("fair: invalid config")

// Config is an escrow's budget and tenants. It is read once by New; later
// changes to it (or to its Weights map) have no effect.
type Config struct {
	// Limit is the budget: units admitted per window, across all tenants.
	// Between 1 and gale.MaxLimit.
	Limit int64
	// Window is the window length: at least a microsecond, whole
	// microseconds, at most gale.MaxPeriod. Windows are aligned on Unix time.
	Window time.Duration
	// Weights are the configured tenants' weights, each finite and > 0. A
	// configured tenant counts in every guarantee's denominator even while
	// idle; its unclaimed share is lent to others.
	Weights map[string]float64
	// DefaultWeight is the weight of a tenant not in Weights, counted only in
	// the windows where it asks. 0 means 1.
	DefaultWeight float64
	// MaxTenants bounds the tenants not in Weights that one window tracks
	// by name (those that asked in this window or the last); the tenants in
	// Weights are always tracked. Escrow and Shared decide a new tenant
	// beyond it on the window's overflow account: one account, listed as
	// Overflow, that every such tenant shares and that weighs DefaultWeight.
	// Such a tenant is admitted, as any is, while the budget has room no
	// other account has claimed; the tenants in the overflow are guaranteed
	// one default tenant's share between them, first come, first served
	// among themselves; the cap holds as ever. A tenant in the overflow is
	// tracked by name again once a window's roll frees a place. Federated
	// counts tenant-region pairs instead, configured or not, and denies a
	// new pair beyond it with ReasonTenants.
	//
	// Each tracked tenant costs about 110 bytes of heap plus its name
	// (TestTrackedTenantBytes), and a call beyond its tenant's guarantee
	// scans and sorts every tracked tenant. 0 means no bound: then memory
	// grows with the distinct tenants of a window, which callers facing the
	// public should not allow.
	MaxTenants int
}

// Overflow is the name under which Shares and Admitted list the overflow
// account of the tenants past Config.MaxTenants (summed with a tenant of
// that name, should one be tracked: decisions keep the two apart).
const Overflow = "_overflow"

// config is a validated Config.
type config struct {
	limit         int64
	window        time.Duration
	weights       map[string]float64
	configured    float64 // Σ weights
	defaultWeight float64
	maxTenants    int
}

func (c Config) validate() (config, error) {
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: c.Limit, Period: c.Window}
	if err := r.Validate(); err != nil {
		return config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	v := config{limit: c.Limit, window: c.Window, weights: make(map[string]float64, len(c.Weights)),
		defaultWeight: c.DefaultWeight, maxTenants: c.MaxTenants}
	if v.defaultWeight == 0 {
		v.defaultWeight = 1
	}
	if !validWeight(v.defaultWeight) {
		return config{}, fmt.Errorf("%w: DefaultWeight %v, want finite and > 0", ErrInvalidConfig, c.DefaultWeight)
	}
	if c.MaxTenants < 0 {
		return config{}, fmt.Errorf("%w: MaxTenants %d, want ≥ 0", ErrInvalidConfig, c.MaxTenants)
	}
	for name, w := range c.Weights {
		if !validWeight(w) {
			return config{}, fmt.Errorf("%w: Weights[%q] = %v, want finite and > 0", ErrInvalidConfig, name, w)
		}
		v.weights[name] = w
		v.configured += w
	}
	return v, nil
}

func validWeight(w float64) bool { return w > 0 && !math.IsInf(w, 0) }

// Reason says why a Decision admitted or denied a call.
type Reason uint8

// The reasons, in the order Decide tries them.
const (
	// ReasonCap denies: the call would take the window past the budget.
	ReasonCap Reason = iota + 1
	// ReasonShare admits: the call keeps its tenant within its guarantee.
	ReasonShare
	// ReasonBorrow admits: the call borrows unclaimed surplus beyond the
	// tenant's guarantee, within its fair share of the demand seen.
	ReasonBorrow
	// ReasonDenied denies: the rest of the budget is claimed by, or fairly
	// owed to, other tenants.
	ReasonDenied
	// ReasonTenants denies: the window already tracks Config.MaxTenants
	// tenant-region pairs and this is a new one (Federated only: Escrow and
	// Shared decide such a call on the overflow account).
	ReasonTenants
)

func (r Reason) String() string {
	switch r {
	case ReasonCap:
		return "cap"
	case ReasonShare:
		return "share"
	case ReasonBorrow:
		return "borrow"
	case ReasonDenied:
		return "denied"
	case ReasonTenants:
		return "tenants"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Decision is the answer to one call. The zero value denies with no reason.
type Decision struct {
	// Allowed reports whether the call's units were admitted.
	Allowed bool
	// Reason is why.
	Reason Reason
	// Borrowed is how many of the call's units lie beyond the tenant's
	// guarantee: 0 unless Reason is ReasonBorrow. Invariant: 0 ≤ Borrowed ≤
	// the call's cost.
	Borrowed int64
	// Guarantee is the tenant's guaranteed share of the window, in units.
	Guarantee int64
	// Admitted is the tenant's units admitted in the window, this call's
	// included when Allowed.
	Admitted int64
	// Remaining is the budget left in the window after this decision, across
	// tenants.
	Remaining int64
	// ResetAt is the end of the window.
	ResetAt time.Time
	// Overflow reports that the call was decided on the overflow account
	// (see Config.MaxTenants): Guarantee and Admitted are then the
	// account's, shared with every tenant in it.
	Overflow bool
	// Overrun is, for a charge (Shared.Charge), the units it counted past
	// the limit; 0 for a charge that fit and for every Decide.
	Overrun int64
}

// Escrow is a weighted-fair escrow of one process's budget. Create it with
// New; the zero value is not usable. It is safe for concurrent use: decisions
// are serialized by a mutex.
type Escrow struct {
	mu sync.Mutex
	l  *ledger
}

// New returns an Escrow for cfg, or an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Escrow, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Escrow{l: newLedger(c)}, nil
}

// Decide admits cost units for tenant at now, or nothing, and says why. A
// cost below 1 is a caller's bug and panics.
func (e *Escrow) Decide(tenant string, cost int64, now time.Time) Decision {
	if cost < 1 {
		panic(fmt.Sprintf("fair: Decide with cost %d, want ≥ 1", cost))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	d, t := e.l.evaluate(tenant, cost, now, e.l.cfg.limit)
	if d.Allowed {
		e.l.commit(t, cost, &d)
	}
	return d
}

// Shares returns the weighted max-min fair share of the budget, in units, of
// each tenant the escrow tracks in the window of its latest decision — those
// that asked in that window or the one before — given their demands seen
// (WaterFill, rounded up: the most it may be admitted). No other tenant is listed, so the map is bounded
// by two windows' tenants (and by MaxTenants, the overflow account listed
// under Overflow).
func (e *Escrow) Shares() map[string]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.l.shares()
}

// Admitted returns the units admitted to each tenant the escrow tracks in
// the window of its latest decision.
func (e *Escrow) Admitted() map[string]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.l.admitted()
}
