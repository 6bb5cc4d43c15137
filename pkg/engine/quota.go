package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// RLQS (the Rate Limit Quota Service) asks for a bucket — a domain and an
// unordered map of entries — what a request descriptor asks of RLS. The
// engine answers with the limits the bucket counts against, each with the
// counter key RLS counts the same descriptor in and a leaser over the
// rule's store, so that the quota server leases units of the same counter
// RLS checks: one policy, one counter and one bound for both protocols.

var _ ratelimit.QuotaResolver = (*Engine)(nil)

// ResolveQuota matches bucket against domain's descriptor tree. The map has
// no order, so the walk starts at the top and at each level consumes the
// entry whose key names a descriptor there (exact value, then a wildcard
// pattern, then the key alone, as RLS matches); when several entries could,
// the lexicographically smallest key wins, with no backtracking. Every entry
// must be consumed, at a descriptor that has limits; otherwise no limit
// applies (QuotaNoLimit, as RLS answers OK).
//
// Of the matched descriptor's limits (those another replaces dropped),
// unlimited and shadow ones are not enforced and are left out; a limit of 0
// blocks the bucket (QuotaBlocked); one RLQS cannot serve (QuotaRefusal)
// refuses it (QuotaRefused). ResolveQuota is safe for concurrent use.
func (e *Engine) ResolveQuota(domain string, bucket map[string]string) (ratelimit.Quota, error) {
	if err := validBucket(domain, bucket); err != nil {
		return ratelimit.Quota{}, err
	}
	c, err := e.acquire()
	if err != nil {
		return ratelimit.Quota{}, err
	}
	defer c.release()
	root := c.domains[domain]
	if root == nil {
		e.noteUnknownDomain(domain, time.Now())
		return ratelimit.Quota{UnknownDomain: true}, nil
	}
	b, path, values := root.matchBucket(bucket)
	if b == nil {
		return ratelimit.Quota{}, nil
	}
	rules := b.rules
	var replaced map[string]bool
	for _, r := range rules {
		replaced = r.noteReplaces(replaced)
	}
	q := ratelimit.Quota{}
	for _, r := range rules {
		if r.replacedIn(replaced) {
			continue
		}
		if r.unlimited || r.shadow {
			continue
		}
		if err := quotaRefusal(r); err != nil {
			return ratelimit.Quota{Kind: ratelimit.QuotaRefused, Refused: err}, nil
		}
		if r.blocked {
			return ratelimit.Quota{Kind: ratelimit.QuotaBlocked}, nil
		}
		key := string(appendRuleKey(nil, r.keyPrefix, path, values))
		q.Limits = append(q.Limits, ratelimit.QuotaLimit{
			Rule: r.ref, Limit: r.galeRule.Limit, Window: r.window(), Key: key,
			Leaser: quotaLeaser{store: e.quotaStore(), rule: r.galeRule},
		})
	}
	if len(q.Limits) > 0 {
		q.Kind = ratelimit.QuotaLimited
	}
	return q, nil
}

// QuotaGeneration changes after every Load that swaps a policy in and at
// Close: an answer of ResolveQuota obtained after reading generation g
// stays the answer for as long as QuotaGeneration returns g. It is one
// atomic load, safe for concurrent use.
func (e *Engine) QuotaGeneration() uint64 { return e.quotaGen.Load() }

// validBucket holds a bucket to the bounds of a request descriptor.
func validBucket(domain string, bucket map[string]string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, fmt.Sprintf(format, args...))
	}
	if err := validDomain(domain); err != nil {
		return err
	}
	switch {
	case len(bucket) == 0:
		return bad("empty bucket id")
	case len(bucket) > MaxEntries:
		return bad("bucket id has %d entries, at most %d", len(bucket), MaxEntries)
	}
	for k, v := range bucket {
		if k == "" {
			return bad("bucket id has an empty key")
		}
		if len(k) > MaxKeyBytes || len(v) > MaxValueBytes {
			return bad("bucket id entry %.32q is too long (key ≤ %d bytes, value ≤ %d)", k, MaxKeyBytes, MaxValueBytes)
		}
	}
	return nil
}

// matchBucket walks the tree with bucket's entries in the order the tree
// asks for them (see ResolveQuota). It returns the branch holding the rules
// (nil: none), the branch of each level and each level's value as the rule
// counts it.
func (root *node) matchBucket(bucket map[string]string) (*branch, []*branch, []string) {
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	used := make([]bool, len(keys))
	var path []*branch
	var values []string
	n := root
	for depth := 0; depth < len(keys); depth++ {
		if n == nil {
			return nil, nil, nil
		}
		var b *branch
		for i, k := range keys {
			if used[i] {
				continue
			}
			if b = n.step(k, bucket[k]); b != nil {
				used[i] = true
				break
			}
		}
		if b == nil {
			return nil, nil, nil
		}
		path = append(path, b)
		v := bucket[b.key]
		if b.share {
			v = b.value
		}
		values = append(values, v)
		n = b.next
	}
	b := path[len(path)-1]
	if len(b.rules) == 0 {
		return nil, nil, nil
	}
	return b, path, values
}

// window is a counted rule's window: unit × unit_multiplier.
func (r *rule) window() time.Duration {
	return r.info.Unit.Duration() * time.Duration(max(r.info.UnitMultiplier, 1))
}

// quotaRefusal says why RLQS cannot serve r (nil: it can). An RLQS
// assignment must end before the window its units were leased in ends, in
// whole seconds: the limit needs discrete windows (fixed_window,
// sliding_window or quota) at least ratelimit.MinQuotaWindow long, and
// units leased straight from the engine's store.
func quotaRefusal(r *rule) error {
	if r.unlimited || r.blocked {
		return nil
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: rule %s/%s: %s (RLS still serves it)", ratelimit.ErrQuotaRefused, r.ref.Domain, r.ref.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case r.fair != nil:
		return refuse("a fairness limit shares its counter among tenants by escrow; RLQS leases units of a counter")
	case r.mode == policy.Federated:
		return refuse("mode federated leases through its region's coordinator; RLQS leases from this process's store")
	case r.quota:
		return refuse("quota_mode reports violations without denying; RLQS assignments always enforce")
	case !r.galeRule.Windowed():
		return refuse("algorithm %s has no window; RLQS needs fixed_window, sliding_window or quota", r.algorithm)
	case r.window() < ratelimit.MinQuotaWindow:
		return refuse("a window of %v; RLQS needs at least %v (Envoy's assignments live in whole seconds and must end before the window does)", r.window(), ratelimit.MinQuotaWindow)
	}
	return nil
}

// QuotaRefusals lists, for the policy in use, every rule a bucket may match
// that RLQS would refuse, each error naming the rule: what `validate --rlqs`
// reports. RLS serves them all.
func (e *Engine) QuotaRefusals() []error {
	c := e.cur.Load()
	var errs []error
	for _, r := range c.rules {
		if r.shadow {
			continue
		}
		if err := quotaRefusal(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// quotaStore is the store quota leases go to: Options.QuotaStore, else
// the engine's.
func (e *Engine) quotaStore() gale.Store {
	if e.opts.QuotaStore != nil {
		return e.opts.QuotaStore
	}
	return e.store
}

// quotaLeaser leases units of a rule's counters from the engine's store.
type quotaLeaser struct {
	store gale.Store
	rule  gale.Rule
}

// Lease leases from the store and moves the window's end to the caller's
// clock by its distance from the store's now (Grant.Now), as the limiter
// does: a store that reads its own clock may run apart from the caller's.
func (q quotaLeaser) Lease(ctx context.Context, key string, min, max int64, now time.Time) (ratelimit.QuotaGrant, error) {
	g, err := q.store.Lease(ctx, key, q.rule, min, max, now)
	if err != nil {
		return ratelimit.QuotaGrant{}, asStoreFailure(err)
	}
	if g.Granted > 0 && g.WindowEnd.IsZero() {
		return ratelimit.QuotaGrant{}, fmt.Errorf("engine: store granted %d units of a windowed rule with no window end", g.Granted)
	}
	out := ratelimit.QuotaGrant{Granted: g.Granted, StoreWindowEnd: g.WindowEnd, StoreNow: g.Now, RetryAfter: g.Decision.RetryAfter}
	if !g.WindowEnd.IsZero() {
		out.WindowEnd = now.Add(g.WindowEnd.Sub(g.Now))
	}
	return out, nil
}

// Announce records member's demand for key's window in the store's
// demand ledger (ratelimit.QuotaAnnouncer); gale.ErrNoLedger when the
// store keeps none.
func (q quotaLeaser) Announce(ctx context.Context, key, member string, demand int64, now time.Time) ([]ratelimit.QuotaDemand, error) {
	d, err := gale.Announce(ctx, q.store, key, q.rule, member, demand, now)
	if errors.Is(err, gale.ErrNoLedger) {
		return nil, err
	}
	if err != nil {
		return nil, asStoreFailure(err)
	}
	out := make([]ratelimit.QuotaDemand, len(d))
	for i, x := range d {
		out[i] = ratelimit.QuotaDemand(x)
	}
	return out, nil
}

// Return gives units back to the window g was leased in.
func (q quotaLeaser) Return(ctx context.Context, key string, units int64, g ratelimit.QuotaGrant, now time.Time) error {
	if units <= 0 || g.StoreWindowEnd.IsZero() {
		return nil
	}
	return asStoreFailure(q.store.Return(ctx, key, q.rule, units, g.StoreWindowEnd, now))
}
