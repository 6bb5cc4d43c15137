package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/fair"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// maxFairKeys bounds a fair rule's counters, one escrow each. Each escrow
// tracks at most the policy's fairness.max_tenants tenants by name, besides
// its configured ones and its overflow account (fair.Config.MaxTenants).
const maxFairKeys = 4096

// maxShareLabels bounds the tenants a fair rule's shares name, for the
// metric's labels: the rest are summed under OtherValue. It bounds what is
// reported, not what is admitted.
const maxShareLabels = MaxMetricValues

// fairRule shares a rule's limit among tenants (pkg/gale/fair): one escrow
// per counter key, each leasing its budget from the store, so a fleet stays
// within the limit. It is the rule's limit: its keys carry the tenant as a
// last field (fairKey).
type fairRule struct {
	cfg     fair.Config
	level   int // the descriptor level whose value names the tenant
	quantum int64
	store   gale.Store
	timeout time.Duration    // each store call's bound
	onError gale.ErrorPolicy // the descriptor's on_store_error
	mu      sync.Mutex
	escrows map[string]*fair.Shared // at most maxFairKeys
}

// newFairRule checks that tenant_key names a level of the rule's path.
func (e *Engine) newFairRule(r *rule, fz *policy.Fairness, keys []string) (*fairRule, error) {
	level := slices.Index(keys, fz.TenantKey)
	if level < 0 {
		return nil, fmt.Errorf("fairness tenant_key %q is not a key of this descriptor or of one above it (%v)", fz.TenantKey, keys)
	}
	maxTenants := fz.MaxTenants
	if maxTenants <= 0 { // a Fairness not read from YAML
		maxTenants = policy.DefaultFairTenants
	}
	cfg := fair.Config{Limit: r.galeRule.Limit, Window: r.galeRule.Period, Weights: fz.Weights, DefaultWeight: fz.DefaultWeight, MaxTenants: maxTenants}
	if _, err := fair.New(cfg); err != nil {
		return nil, err
	}
	return &fairRule{
		cfg:     cfg,
		level:   level,
		quantum: max(1, r.galeRule.Limit/20),
		store:   e.store,
		timeout: e.storeTimeout(),
		onError: errorPolicy(r.onError),
		escrows: map[string]*fair.Shared{},
	}, nil
}

// escrow returns the escrow of one counter key.
func (f *fairRule) escrow(key string) (*fair.Shared, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.escrows[key]; s != nil {
		return s, nil
	}
	if len(f.escrows) >= maxFairKeys {
		for k := range f.escrows { // drop one: its leased budget idles until its window ends (under-admission only)
			delete(f.escrows, k)
			break
		}
	}
	key = strings.Clone(key) // a substring of the request's key: keep only the counter's
	s, err := fair.NewShared(f.cfg, f.store, key, f.quantum)
	if err != nil {
		return nil, err
	}
	f.escrows[key] = s
	return s, nil
}

// CheckBytes is Check: a fair rule's escrow keeps its counter key.
func (f *fairRule) CheckBytes(ctx context.Context, key []byte, cost int64, now time.Time) (gale.Decision, error) {
	return f.Check(ctx, string(key), cost, now)
}

// Check admits cost units for the tenant key names from its counter's
// escrow, or nothing. A denial's RetryAfter is the end of the window: the
// escrow cannot say sooner.
func (f *fairRule) Check(ctx context.Context, key string, cost int64, now time.Time) (gale.Decision, error) {
	return f.ask(ctx, (*fair.Shared).Decide, key, cost, now)
}

// Charge counts n units for the tenant key names in full, even past the
// limit, as every rule counts a charge (a cost already spent: the extra
// over a reservation, Envoy's hits_addend), and answers whether they fit;
// what follows in the window sees the spend. A check-only charge (n = 0)
// is a check of one unit (Descriptor.HitsAddend): an escrow has no count
// to read without taking.
func (f *fairRule) Charge(ctx context.Context, key string, n int64, now time.Time) (gale.Decision, error) {
	if n < 1 {
		return f.Check(ctx, key, 1, now)
	}
	return f.ask(ctx, (*fair.Shared).Charge, key, n, now)
}

// ask puts n units for the tenant key names to its counter's escrow with
// op (Decide or Charge) under the store timeout, and answers as a gale
// decision: a store error by the descriptor's on_store_error; a denial
// with the window's end as its RetryAfter. WindowEnd stays zero: Refund
// gives nothing back, so no window needs naming.
func (f *fairRule) ask(ctx context.Context, op func(*fair.Shared, context.Context, string, int64, time.Time) (fair.Decision, error), key string, n int64, now time.Time) (gale.Decision, error) {
	counter, tenant := splitTenant(key)
	s, err := f.escrow(counter)
	if err != nil {
		return gale.Decision{}, err
	}
	sctx, cancel := gale.StoreContext(ctx, f.timeout)
	fd, err := op(s, sctx, tenant, n, now)
	cancel()
	if err != nil {
		return f.onError.Answer(ctx, f.cfg.Limit, err)
	}
	d := gale.Decision{Allowed: fd.Allowed, Limit: f.cfg.Limit, Remaining: fd.Remaining, ResetAt: fd.ResetAt, Overrun: fd.Overrun}
	if !d.Allowed {
		d.RetryAfter = max(fd.ResetAt.Sub(now), 0)
	}
	return d, nil
}

// ChargeBytes is Charge.
func (f *fairRule) ChargeBytes(ctx context.Context, key []byte, n int64, now time.Time) (gale.Decision, error) {
	return f.Charge(ctx, string(key), n, now)
}

// Refund returns errNoRefund: an escrow keeps what it admitted, which is why
// fair rules are asked last, once no other limit has denied the request.
func (f *fairRule) Refund(context.Context, string, int64, gale.Decision, time.Time) error {
	return errNoRefund
}

// GiveBack gives nothing back: an escrow keeps what it admitted.
func (f *fairRule) GiveBack(context.Context, string, int64, time.Time) (int64, error) {
	return 0, nil
}

// shares sums the tenants' shares over every counter: at most
// maxShareLabels tenants by name, the rest under OtherValue, and each
// counter's overflow account under fair.Overflow.
func (f *fairRule) shares() map[string]int64 {
	f.mu.Lock()
	escrows := make([]*fair.Shared, 0, len(f.escrows))
	for _, s := range f.escrows {
		escrows = append(escrows, s)
	}
	f.mu.Unlock()
	out, named := map[string]int64{}, 0
	for _, s := range escrows {
		for t, v := range s.Shares() {
			if _, ok := out[t]; !ok && t != fair.Overflow {
				if named < maxShareLabels {
					named++
				} else {
					t = OtherValue
				}
			}
			out[t] += v
		}
	}
	return out
}
