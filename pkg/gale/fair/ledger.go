package fair

import (
	"math"
	"strings"
	"time"
)

// ledger is the pure core of an escrow: the accounting of one window. It
// reads no clock, takes no lock and does no I/O; Escrow and Shared wrap it.
type ledger struct {
	cfg config

	// end is the end of the window the ledger counts; the zero time before
	// the first decision.
	end     time.Time
	tenants map[string]*tenant
	// overflow is the account of the unconfigured tenants past
	// cfg.maxTenants, nil while none has asked in this window or the one
	// before. It is never in tenants.
	overflow *tenant
	// active lists the tenants of tenants, and overflow when it is not nil:
	// those that asked in this window or in the one before.
	active []*tenant
	// named counts the unconfigured tenants of tenants. Invariant: named ≤
	// cfg.maxTenants when that is above 0.
	named int
	// weight is W: the configured weights plus DefaultWeight for each
	// unconfigured active tenant. Invariant: weight > 0 once a tenant is
	// active.
	weight float64
	// used is the window's admissions. Invariant: used = Σ active[i].used.
	used int64
	// capacity is the budget the last decision shared out.
	capacity int64

	// Scratch space for water-filling, reused between decisions.
	demands, weights []float64
	order            []int
}

// tenant is one tenant's account for the window.
// Invariant: 0 ≤ used ≤ demand.
type tenant struct {
	account
	name       string
	weight     float64
	configured bool // weight is from Config.Weights
}

// account is what a window knows of one claimant's demand: a tenant's (the
// ledger), a tenant-region pair's (Federated).
type account struct {
	demand   int64 // units asked for in the window, admitted or not
	used     int64 // units admitted in the window
	forecast int64 // units asked for in the previous window
}

// asked is the demand seen: what was asked for in this window, or in the
// previous one when that was more.
func (a *account) asked() int64 { return max(a.demand, a.forecast) }

// carry takes a into the window that follows: its demand is the forecast.
func (a *account) carry() { a.forecast, a.demand, a.used = a.demand, 0, 0 }

// claimable is the part of guarantee within a's demand seen that it has
// not been admitted: what it has claimed of the budget.
func (a *account) claimable(guarantee int64) int64 {
	return max(0, min(guarantee, a.asked())-a.used)
}

// rollWindow moves *end to the end of the window of w holding now, when
// now is past it: rolled reports whether it moved, next whether the new
// window directly follows the old (demand then carries over as forecasts).
func rollWindow(end *time.Time, now time.Time, w time.Duration) (rolled, next bool) {
	if now.Before(*end) {
		return false, false
	}
	us, p := now.UnixMicro(), w.Microseconds()
	start := time.UnixMicro(floorDiv(us, p) * p)
	next = end.Equal(start)
	*end = start.Add(w)
	return true, next
}

func newLedger(cfg config) *ledger {
	return &ledger{cfg: cfg, tenants: make(map[string]*tenant), weight: cfg.configured, capacity: cfg.limit}
}

// roll starts the window holding now if the ledger's window has ended. A
// tenant that asked for units in the window just ended is carried into the
// next one with that demand as its forecast; everyone else is forgotten. A
// now before the window's start (a clock stepping back) counts in the
// current window.
func (l *ledger) roll(now time.Time) {
	rolled, next := rollWindow(&l.end, now, l.cfg.window)
	if !rolled {
		return
	}
	l.weight, l.used, l.named = l.cfg.configured, 0, 0
	kept := l.active[:0]
	for _, t := range l.active {
		if !next || t.demand == 0 {
			if t == l.overflow {
				l.overflow = nil
			} else {
				delete(l.tenants, t.name)
			}
			continue
		}
		t.carry()
		if !t.configured {
			l.weight += t.weight
			if t != l.overflow {
				l.named++
			}
		}
		kept = append(kept, t)
	}
	clear(l.active[len(kept):])
	l.active = kept
}

// evaluate decides a call of cost units by name at now over a budget of
// capacity units for the window, and records its demand; it does not admit
// it: the caller commits an allowed decision once it holds the units. It
// returns the account the call is decided on: the tenant's, or the
// overflow's.
func (l *ledger) evaluate(name string, cost int64, now time.Time, capacity int64) (Decision, *tenant) {
	l.roll(now)
	l.capacity = capacity
	t := l.tenants[name]
	if t == nil {
		t = l.add(name)
	}
	t.demand += cost
	d := Decision{Guarantee: l.guarantee(t), Admitted: t.used, Remaining: capacity - l.used, ResetAt: l.end, Overflow: t == l.overflow}
	switch {
	case l.used+cost > capacity:
		d.Reason = ReasonCap
	case t.used+cost <= d.Guarantee:
		d.Allowed, d.Reason = true, ReasonShare
	case capacity-l.used-cost < l.claimedBesides(t) || !l.mayBorrow(t, cost, capacity):
		d.Reason = ReasonDenied
	default:
		d.Allowed, d.Reason = true, ReasonBorrow
		d.Borrowed = t.used + cost - max(t.used, d.Guarantee)
	}
	return d, t
}

// mayBorrow reports whether t may borrow cost units past its guarantee:
// when they keep it within its entitlement (its weighted max-min fair
// share, rounded down); or, past that, within the share rounded up (or
// as its first call of the window, whatever its cost: as a Deficit Round
// Robin quantum lets a packet larger than it go) when the budget left
// after them still covers what the other tenants are owed up to their
// entitlements. So the rounding's remainder goes to whoever asks for it
// first, and every window can admit min(Σ demand, capacity): rounded down
// alone, shares under one unit (more tenants asking than the capacity has
// units) were all 0, and the rule admitted nothing.
func (l *ledger) mayBorrow(t *tenant, cost, capacity int64) bool {
	lambda := l.level()
	share := min(float64(t.asked()), t.weight*lambda)
	if t.used+cost <= units(share) {
		return true
	}
	if t.used > 0 && t.used+cost > unitsUp(share) {
		return false
	}
	var owed int64
	for _, o := range l.active {
		if o != t {
			owed += max(0, units(min(float64(o.asked()), o.weight*lambda))-o.used)
		}
	}
	return capacity-l.used-cost >= owed
}

// add starts the window's account of a tenant it does not track: its own,
// or the overflow's once cfg.maxTenants unconfigured tenants are tracked.
func (l *ledger) add(name string) *tenant {
	w, configured := l.cfg.weights[name]
	if !configured && l.cfg.maxTenants > 0 && l.named >= l.cfg.maxTenants {
		if l.overflow == nil {
			l.overflow = &tenant{name: Overflow, weight: l.cfg.defaultWeight}
			l.weight += l.overflow.weight
			l.active = append(l.active, l.overflow)
		}
		return l.overflow
	}
	if !configured {
		w = l.cfg.defaultWeight
		l.weight += w
		l.named++
	}
	// The caller's name may be a substring of a larger string (a request's
	// key): keep only the name.
	t := &tenant{name: strings.Clone(name), weight: w, configured: configured}
	l.tenants[t.name] = t
	l.active = append(l.active, t)
	return t
}

// commit admits an allowed decision of cost units for t.
func (l *ledger) commit(t *tenant, cost int64, d *Decision) {
	t.used += cost
	l.used += cost
	d.Admitted, d.Remaining = t.used, l.capacity-l.used
}

// guarantee is t's guaranteed share of the capacity, in whole units.
func (l *ledger) guarantee(t *tenant) int64 {
	return units(t.weight * float64(l.capacity) / l.weight)
}

// claimedBesides is the budget the tenants other than t have claimed: the
// part of their guarantee within their demand seen that they have not been
// admitted.
func (l *ledger) claimedBesides(t *tenant) int64 {
	var c int64
	for _, o := range l.active {
		if o != t {
			c += o.claimable(l.guarantee(o))
		}
	}
	return c
}

// level is the water level of the demands seen over the capacity.
func (l *ledger) level() float64 {
	n := len(l.active)
	l.demands, l.weights, l.order = l.demands[:0], l.weights[:0], grow(l.order, n)
	for _, o := range l.active {
		l.demands = append(l.demands, float64(o.asked()))
		l.weights = append(l.weights, o.weight)
	}
	return waterLevel(float64(l.capacity), l.demands, l.weights, l.order)
}

// shares returns each active tenant's entitlement.
func (l *ledger) shares() map[string]int64 {
	m := make(map[string]int64, len(l.active))
	if len(l.active) == 0 {
		return m
	}
	lambda := l.level()
	for _, o := range l.active {
		m[o.name] += unitsUp(min(float64(o.asked()), o.weight*lambda))
	}
	return m
}

// admitted returns each active tenant's admissions.
func (l *ledger) admitted() map[string]int64 {
	m := make(map[string]int64, len(l.active))
	for _, o := range l.active {
		m[o.name] += o.used
	}
	return m
}

// units rounds a fractional share down to whole units, forgiving the
// rounding error of the float arithmetic that produced it (w·L/W can land a
// hair under an integer it equals).
func units(x float64) int64 {
	return int64(math.Floor(x + 1e-9*max(1, x)))
}

// unitsUp rounds a fractional share up to whole units, forgiving the float
// arithmetic's error as units does.
func unitsUp(x float64) int64 {
	return int64(math.Ceil(x - 1e-9*max(1, x)))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func grow(s []int, n int) []int {
	if cap(s) < n {
		return make([]int, n)
	}
	return s[:n]
}
