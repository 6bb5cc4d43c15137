package fair

import (
	"fmt"
	"sync"
	"time"
)

// Federated is a weighted-fair escrow of one global budget shared by
// tenants in several regions: the federated weighted-fair escrow. Each
// tenant's global admissions track its flat weighted max-min fair share of
// Limit given its demand summed over regions, whatever regions it calls
// from (Allocate composes the cross-region and in-region layers that give
// each tenant-region pair its share).
//
// Calls are decided as Escrow decides them, per tenant-region pair:
//
//  1. Cap: a call that would take the window past Limit is denied.
//  2. Share: a call within the pair's guarantee, w_{t,r}/W·Limit, is
//     admitted. w_{t,r} is the tenant's weight split by its demand seen in
//     the region (so a tenant's guarantees over its regions sum to its own,
//     w_t/W·Limit) and W is the configured weights plus DefaultWeight for
//     each unconfigured tenant seen in this window or the last. The
//     guarantees of a region's pairs are the region's reservation: no other
//     region can take them.
//  3. Borrow: a call beyond the guarantee is admitted when it takes nothing
//     the other pairs have claimed (the part of their guarantee within their
//     demand seen that they have not been admitted) and keeps the pair
//     within its share from Allocate over the demands seen.
//
// Demand seen and the forecast from the previous window are as in Escrow;
// Config.MaxTenants bounds the tenant-region pairs a window tracks, the
// configured tenants' included: a new pair beyond it is denied with
// ReasonTenants (Federated has no overflow account).
//
// Federated is one arbiter for every region, in process: the regions'
// sidecars would reach it through a store, which is not built (see the
// package documentation). It is safe for concurrent use; decisions are
// serialized by a mutex. Create it with NewFederated.
type Federated struct {
	mu  sync.Mutex
	cfg config

	end     time.Time
	pairs   map[pairKey]*pair
	active  []*pair // the pairs of pairs: asked in this window or the last
	tenants map[string]*global
	weight  float64 // W
	used    int64
	// stale is set when a pair's demand seen changed since shares were
	// last computed.
	stale bool

	demands []Demand  // scratch for Allocate
	alloc   []float64 // Allocate's last answer, by active index
}

type pairKey struct{ region, tenant string }

// pair is one tenant's account in one region for the window.
// Invariant: 0 ≤ used ≤ demand.
type pair struct {
	account
	key    pairKey
	tenant *global
	share  int64 // entitlement from the last Allocate
}

// global is a tenant's account over its regions.
type global struct {
	weight     float64
	configured bool
	asked      int64 // Σ asked over the tenant's active pairs
	pairs      int
}

// NewFederated returns a Federated for cfg, or an error wrapping
// ErrInvalidConfig.
func NewFederated(cfg Config) (*Federated, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return &Federated{cfg: c, pairs: make(map[pairKey]*pair), tenants: make(map[string]*global), weight: c.configured}, nil
}

// Decide admits cost units for tenant calling from region at now, or
// nothing, and says why. A cost below 1 is a caller's bug and panics.
func (f *Federated) Decide(region, tenant string, cost int64, now time.Time) Decision {
	if cost < 1 {
		panic(fmt.Sprintf("fair: Decide with cost %d, want ≥ 1", cost))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roll(now)
	limit := f.cfg.limit
	p := f.pairs[pairKey{region, tenant}]
	if p == nil {
		if f.cfg.maxTenants > 0 && len(f.active) >= f.cfg.maxTenants {
			return Decision{Reason: ReasonTenants, Remaining: limit - f.used, ResetAt: f.end}
		}
		p = f.add(pairKey{region, tenant})
	}
	f.ask(p, cost)
	d := Decision{Guarantee: f.guarantee(p), Admitted: p.used, Remaining: limit - f.used, ResetAt: f.end}
	switch {
	case f.used+cost > limit:
		d.Reason = ReasonCap
		return d
	case p.used+cost <= d.Guarantee:
		d.Allowed, d.Reason = true, ReasonShare
	case limit-f.used-cost < f.claimedBesides(p) || p.used+cost > f.share(p):
		d.Reason = ReasonDenied
		return d
	default:
		d.Allowed, d.Reason = true, ReasonBorrow
		d.Borrowed = p.used + cost - max(p.used, d.Guarantee)
	}
	p.used += cost
	f.used += cost
	d.Admitted, d.Remaining = p.used, limit-f.used
	return d
}

// roll starts the window holding now if the current one has ended, carrying
// the pairs that asked in the window just ended with that demand as their
// forecast, as ledger.roll does.
func (f *Federated) roll(now time.Time) {
	rolled, next := rollWindow(&f.end, now, f.cfg.window)
	if !rolled {
		return
	}
	f.used, f.stale = 0, true
	kept := f.active[:0]
	for _, p := range f.active {
		if !next || p.demand == 0 {
			delete(f.pairs, p.key)
			continue
		}
		p.carry()
		kept = append(kept, p)
	}
	clear(f.active[len(kept):])
	f.active = kept
	clear(f.tenants)
	f.weight = f.cfg.configured
	for _, p := range f.active {
		p.tenant = f.global(p.key.tenant)
		p.tenant.pairs++
		p.tenant.asked += p.asked()
	}
}

// add starts an account for key in the window.
func (f *Federated) add(key pairKey) *pair {
	p := &pair{key: key, tenant: f.global(key.tenant)}
	p.tenant.pairs++
	f.pairs[key] = p
	f.active = append(f.active, p)
	f.stale = true
	return p
}

// global returns the tenant's account, counting an unconfigured tenant's
// DefaultWeight in W the first time the window sees it.
func (f *Federated) global(name string) *global {
	g := f.tenants[name]
	if g == nil {
		w, ok := f.cfg.weights[name]
		if !ok {
			w = f.cfg.defaultWeight
			f.weight += w
		}
		g = &global{weight: w, configured: ok}
		f.tenants[name] = g
	}
	return g
}

// ask records a call's demand.
func (f *Federated) ask(p *pair, cost int64) {
	before := p.asked()
	p.demand += cost
	if grown := p.asked() - before; grown > 0 {
		p.tenant.asked += grown
		f.stale = true
	}
}

// weightOf is w_{t,r}: the tenant's weight split by its demand seen here.
func (f *Federated) weightOf(p *pair) float64 {
	return p.tenant.weight * float64(p.asked()) / float64(p.tenant.asked)
}

// guarantee is the pair's guaranteed share of the budget, in whole units.
func (f *Federated) guarantee(p *pair) int64 {
	return units(f.weightOf(p) * float64(f.cfg.limit) / f.weight)
}

// claimedBesides is the budget the pairs other than p have claimed.
func (f *Federated) claimedBesides(p *pair) int64 {
	var c int64
	for _, o := range f.active {
		if o != p {
			c += o.claimable(f.guarantee(o))
		}
	}
	return c
}

// share is the pair's federated weighted-fair share of the budget given the
// demands seen, recomputed only when a demand seen has changed: under
// steady demand the forecast covers the window's calls and it is not.
func (f *Federated) share(p *pair) int64 {
	if f.stale {
		f.demands = f.demands[:0]
		for _, o := range f.active {
			f.demands = append(f.demands, Demand{Region: o.key.region, Tenant: o.key.tenant, Units: float64(o.asked()), Weight: o.tenant.weight})
		}
		f.alloc = Allocate(float64(f.cfg.limit), f.demands)
		for i, o := range f.active {
			o.share = units(f.alloc[i])
		}
		f.stale = false
	}
	return p.share
}

// Shares returns each tracked tenant's share of the budget in each region
// it asked from, by region then tenant, given the demands seen.
func (f *Federated) Shares() map[string]map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]map[string]int64)
	for _, p := range f.active {
		if m[p.key.region] == nil {
			m[p.key.region] = make(map[string]int64)
		}
		m[p.key.region][p.key.tenant] = f.share(p)
	}
	return m
}

// Admitted returns the units admitted to each tracked tenant in each region
// in the window of the latest decision, by region then tenant.
func (f *Federated) Admitted() map[string]map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := make(map[string]map[string]int64)
	for _, p := range f.active {
		if m[p.key.region] == nil {
			m[p.key.region] = make(map[string]int64)
		}
		m[p.key.region][p.key.tenant] = p.used
	}
	return m
}
