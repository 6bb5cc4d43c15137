package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/fair"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Bounds of a fair rule's state: counters (one escrow each) and tenants.
const (
	maxFairKeys    = 4096
	maxFairTenants = 100
)

// fairRule shares a rule's limit among tenants (pkg/gale/fair): one escrow
// per counter key, each leasing its budget from the store, so a fleet stays
// within the limit.
type fairRule struct {
	cfg     fair.Config
	level   int // the descriptor level whose value names the tenant
	quantum int64
	mu      sync.Mutex
	escrows map[string]*fair.Shared // at most maxFairKeys
}

// newFairRule checks that tenant_key names a level of the rule's path.
func (e *Engine) newFairRule(r *rule, fz *policy.Fairness, keys []string) (*fairRule, error) {
	level := slices.Index(keys, fz.TenantKey)
	if level < 0 {
		return nil, fmt.Errorf("fairness tenant_key %q is not a key of this descriptor or of one above it (%v)", fz.TenantKey, keys)
	}
	cfg := fair.Config{Limit: r.galeRule.Limit, Window: r.galeRule.Period, Weights: fz.Weights, DefaultWeight: fz.DefaultWeight, MaxTenants: maxFairTenants}
	if _, err := fair.New(cfg); err != nil {
		return nil, err
	}
	return &fairRule{cfg: cfg, level: level, quantum: max(1, r.galeRule.Limit/20), escrows: map[string]*fair.Shared{}}, nil
}

// escrow returns the escrow of one counter key.
func (f *fairRule) escrow(store gale.Store, key string) (*fair.Shared, error) {
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
	s, err := fair.NewShared(f.cfg, store, key, f.quantum)
	if err != nil {
		return nil, err
	}
	f.escrows[key] = s
	return s, nil
}

// shares sums the tenants' shares over every counter, at most
// maxFairTenants tenants (the rest under OtherValue).
func (f *fairRule) shares() map[string]int64 {
	f.mu.Lock()
	escrows := make([]*fair.Shared, 0, len(f.escrows))
	for _, s := range f.escrows {
		escrows = append(escrows, s)
	}
	f.mu.Unlock()
	out := map[string]int64{}
	for _, s := range escrows {
		for t, v := range s.Shares() {
			if _, ok := out[t]; !ok && len(out) >= maxFairTenants {
				t = OtherValue
			}
			out[t] += v
		}
	}
	return out
}

// evaluateFair asks a fair rule for the hit's tenant.
func (e *Engine) evaluateFair(ctx context.Context, h *hit, info *LimitInfo, now time.Time) error {
	s, err := h.r.fair.escrow(e.store, h.key)
	if err != nil {
		return err
	}
	sctx, cancel := gale.StoreContext(ctx, e.storeTimeout())
	d, err := s.Decide(sctx, h.tenant, h.cost, now)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The descriptor's on_store_error decides, as for every other rule.
		switch h.r.onError {
		case policy.OnErrorAllow:
			h.status = Status{Code: CodeOK, Limit: info}
			return nil
		case policy.OnErrorDeny:
			h.over = true
			h.status = Status{Code: CodeOverLimit, Limit: info}
			return nil
		}
		return errors.Join(gale.ErrStore, err)
	}
	h.over = !d.Allowed
	h.status = Status{Code: CodeOK, Limit: info, Remaining: clampUint32(d.Remaining), UntilReset: max(d.ResetAt.Sub(now), 0)}
	if h.over {
		h.status.Code, h.status.Remaining = CodeOverLimit, 0
	}
	return nil
}
