package engine

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// compiled is one policy set made ready to answer: a descriptor tree per
// domain and a rule per limit. It is immutable once built, except for the
// limiters' own state and the count of the requests using it (handover.go).
type compiled struct {
	set     *policy.Set
	domains map[string]*node
	rules   []*rule
	gates   []*gateRule
	costs   []*costRule // the cost limits (ext_proc reserve/settle), cost.go

	// users is the number of requests answering from this policy (acquire
	// without release yet), minus retiredBias once the policy is retired.
	// Invariant: users ≥ 0 until retired; then users + retiredBias requests
	// may still use its limiters, and none does when users = −retiredBias.
	users    atomic.Int64
	handover *handover // the engine's: where a drained policy's limiters go
	log      *slog.Logger
}

// newCompiled returns an empty compiled policy for set.
func (e *Engine) newCompiled(set *policy.Set, domains int) *compiled {
	return &compiled{set: set, domains: make(map[string]*node, domains), handover: &e.handover, log: e.log}
}

// rule is one limit of one policy descriptor.
type rule struct {
	ref  RuleRef // domain and metric name
	name string  // the limit's own name ("" if none), for replaces
	// id is the rule's counter identity in its keys (counterID, key.go):
	// domain, descriptor path, period and algorithm; never the limit's
	// name, place or figures, so a reload that renames, reorders or
	// re-figures the limit keeps its counters.
	id string
	// keyPrefix is the fields of the domain and of id that begin every key
	// of the rule's counters (key.go).
	keyPrefix string
	// identity is everything the limiter is built from: a rule with the
	// same identity after a reload keeps its limiter (and its L1 state); a
	// renamed or moved limit keeps it too. A rule whose identity changed
	// gets a new limiter over the same keys (as long as id stays), and the
	// old one returns its credits there once drained (handover.go).
	identity string
	info     LimitInfo
	// lim answers the rule's checks: limiter, or fair; nil when the rule is
	// unlimited or blocked.
	lim     limit
	limiter *gale.Limiter // nil when unlimited, blocked or fair
	// timeout is a federated limiter's store timeout, longer than the
	// engine's; 0 otherwise.
	timeout  time.Duration
	galeRule gale.Rule

	unlimited   bool
	blocked     bool // requests_per_unit 0: every request is over
	shadow      bool
	quota       bool
	metricValue bool // detailed_metric or value_to_metric: metrics carry the value
	// statPath is the descriptor path as envoyproxy/ratelimit names its
	// statistics (RuleSnapshot.Path).
	statPath  []string
	replaces  []string
	fair      *fairRule // non-nil: the limit is shared fairly among tenants
	onError   policy.StoreErrorPolicy
	stats     *ruleStats
	mode      policy.Mode      // for traces
	algorithm policy.Algorithm // for traces; "" when unlimited or blocked
}

// compile turns set into a compiled policy. With build, it creates the
// limiters, taking over those of prev whose identity is unchanged (prev may
// be nil); without, it only validates. It returns every problem as
// policy.Errors.
func (e *Engine) compile(set *policy.Set, prev *compiled, build bool) (*compiled, map[string]*gale.Limiter, error) {
	c := e.newCompiled(set, len(set.Domains))
	var errs policy.Errors
	var created []*gale.Limiter // made by this compile: closed again if it fails
	old := map[string]*gale.Limiter{}
	if prev != nil {
		for _, r := range prev.rules {
			if r.limiter != nil {
				old[r.identity] = r.limiter
			}
		}
	}
	names := map[RuleRef]bool{}
	for _, d := range set.Domains {
		root := newNode()
		c.domains[d.Name] = root
		var walk func(n *node, descs []*policy.Descriptor, path, keys []string, descPath []byte)
		walk = func(n *node, descs []*policy.Descriptor, path, keys []string, descPath []byte) {
			for _, pd := range descs {
				b := &branch{key: pd.Key, keyField: string(appendField(nil, pd.Key)), value: pd.Value, wild: pd.HasWildcard(), share: pd.ShareThreshold && pd.HasWildcard()}
				switch {
				case pd.Value == "":
					n.keyOnly[pd.Key] = b
				case b.wild:
					b.parts = strings.Split(pd.Value, "*")
					n.wildcard = append(n.wildcard, b)
				default:
					n.exact[entryKey{pd.Key, pd.Value}] = b
				}
				step := pd.Key
				if pd.Value != "" {
					step += "_" + pd.Value
				}
				here := append(append([]string(nil), path...), step)
				hereKeys := append(append([]string(nil), keys...), pd.Key)
				hereDesc := appendField(appendField(append([]byte(nil), descPath...), pd.Key), pd.Value)
				counted := map[string]*policy.Limit{} // this descriptor's counters: one limit each
				for j, l := range pd.Limits {
					r, err := e.newRule(d.Name, here, string(hereDesc), pd, l)
					if err == nil {
						r.statPath = here
					}
					if err == nil && pd.Fairness != nil {
						r.fair, err = e.newFairRule(r, pd.Fairness, hereKeys)
					}
					if err != nil {
						errs = append(errs, &policy.Error{Pos: l.Pos, Field: cmp.Or(l.Field, "rate_limit"), Msg: err.Error()})
						continue
					}
					if r.galeRule.Limit > 0 {
						if first := counted[r.id]; first != nil {
							// The policy refuses this (policy: "counts the same
							// requests"); a set built in code may not.
							errs = append(errs, &policy.Error{Pos: l.Pos, Field: cmp.Or(l.Field, "rate_limit"),
								Msg: fmt.Sprintf("counts the same requests as the limit at line %d (both %s per %v): they would share one counter and count every request twice; remove one, or give it another unit", first.Pos.Line, r.algorithm, l.Period())})
							continue
						}
						counted[r.id] = l
					}
					if names[r.ref] {
						// Two unnamed limits on one descriptor: tell them apart
						// in metrics (a label: counters do not depend on it).
						r.ref.Name += "#" + strconv.Itoa(j)
					}
					names[r.ref] = true
					if build && r.galeRule.Limit > 0 && r.fair == nil {
						if lim := old[r.identity]; lim != nil {
							r.limiter = lim
							delete(old, r.identity)
						} else if r.limiter, err = e.newLimiter(r, pd); err != nil {
							errs = append(errs, &policy.Error{Pos: l.Pos, Field: cmp.Or(l.Field, "rate_limit"), Msg: err.Error()})
							continue
						} else {
							created = append(created, r.limiter)
						}
					}
					if r.limiter != nil && pd.Mode == policy.Federated {
						r.timeout = r.limiter.StoreTimeout()
					}
					switch {
					case r.limiter != nil:
						r.lim = r.limiter
					case r.fair != nil:
						r.lim = r.fair
					}
					r.stats = e.statsFor(r.ref)
					b.rules = append(b.rules, r)
					c.rules = append(c.rules, r)
				}
				if len(pd.Descriptors) > 0 {
					b.next = newNode()
					walk(b.next, pd.Descriptors, here, hereKeys, hereDesc)
				}
			}
		}
		walk(root, d.Descriptors, nil, nil, nil)
	}
	gates, gerrs := e.compileGates(set, prev, build)
	errs = append(errs, gerrs...)
	c.gates = gates
	c.costs = compileCosts(set)
	if len(errs) > 0 {
		// Limiters made for this set are not in use: close them.
		for _, l := range created {
			_ = l.Close(e.bg)
		}
		return nil, nil, errs
	}
	return c, old, nil
}

// newRule builds the rule of limit l of descriptor pd, at path (its metric
// name's steps) and descPath (its levels' keys and values as fields).
func (e *Engine) newRule(domain string, path []string, descPath string, pd *policy.Descriptor, l *policy.Limit) (*rule, error) {
	r := &rule{
		ref:         RuleRef{Domain: domain, Name: l.Name},
		name:        l.Name,
		unlimited:   l.Unlimited,
		shadow:      pd.ShadowMode || e.opts.Shadow,
		quota:       pd.QuotaMode,
		metricValue: pd.DetailedMetric || pd.ValueToMetric,
		replaces:    l.Replaces,
		onError:     pd.OnStoreError,
		mode:        pd.Mode,
		info:        LimitInfo{Name: l.Name, Unit: l.Unit, RequestsPerUnit: l.RequestsPerUnit, UnitMultiplier: max(l.UnitMultiplier, 1)},
	}
	if r.ref.Name == "" {
		r.ref.Name = strings.Join(path, ".")
	}
	switch {
	case l.Unlimited:
	case l.RequestsPerUnit == 0:
		r.blocked = true
	default:
		gr, err := galeRule(l)
		if err != nil {
			return nil, err
		}
		r.galeRule = gr
		r.algorithm = cmp.Or(l.Algorithm, policy.FixedWindow)
	}
	r.id = counterID(domain, descPath, r.galeRule)
	r.keyPrefix = string(appendField(appendField(nil, domain), r.id))
	r.identity = fmt.Sprintf("%s|%+v|%s|%+v|%s", r.id, r.galeRule, pd.Mode, pd.Lease, pd.OnStoreError)
	if pd.Federation != nil {
		// A federated limiter's region reports under the rule's name: a
		// renamed rule gets a new one (its RuleState, by counter, stays).
		r.identity += fmt.Sprintf("|%+v|%s", *pd.Federation, r.ref.Name)
	}
	return r, nil
}

// galeRule translates a policy limit into gale's terms.
func galeRule(l *policy.Limit) (gale.Rule, error) {
	r := gale.Rule{Limit: int64(l.RequestsPerUnit), Period: l.Period()}
	switch l.Algorithm {
	case policy.FixedWindow, "":
		r.Algorithm = gale.FixedWindow
	case policy.SlidingWindow:
		r.Algorithm = gale.SlidingWindow
	case policy.GCRA:
		r.Algorithm, r.Burst = gale.GCRA, int64(l.Burst)
	case policy.TokenBucket:
		r.Algorithm, r.Burst = gale.TokenBucket, int64(l.Burst)
	case policy.Quota:
		r.Algorithm, r.Period = gale.Quota, 0
		switch l.Unit {
		case policy.Day:
			r.Calendar = gale.Day
		case policy.Week:
			r.Calendar = gale.Week
		case policy.Month:
			r.Calendar = gale.Month
		case policy.Year:
			r.Calendar = gale.Year
		default:
			return gale.Rule{}, fmt.Errorf("algorithm quota counts per calendar day, week, month or year, not per %s", l.Unit)
		}
		if l.UnitMultiplier > 1 {
			return gale.Rule{}, fmt.Errorf("algorithm quota takes no unit_multiplier (got %d)", l.UnitMultiplier)
		}
	default:
		return gale.Rule{}, fmt.Errorf("unknown algorithm %q", l.Algorithm)
	}
	if err := r.Validate(); err != nil {
		return gale.Rule{}, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), gale.ErrInvalidRule.Error()+": "))
	}
	return r, nil
}

// newLimiter makes r's limiter: over the engine's store, or, federated,
// over its region's.
func (e *Engine) newLimiter(r *rule, pd *policy.Descriptor) (*gale.Limiter, error) {
	cfg := e.limiterConfig(r, pd)
	if pd.Mode != policy.Federated {
		return gale.New(e.store, cfg)
	}
	if e.opts.Federation == nil {
		return nil, errors.New("mode: federated needs this process to join a federation: start it with --region and --federation-url (redis:// or postgres://)")
	}
	fed, err := e.opts.Federation(FederatedRule{Ref: r.ref, Counter: r.id, Rule: r.galeRule, Federation: *pd.Federation})
	if err != nil {
		return nil, err
	}
	cfg.Mode, cfg.OnStoreError = gale.Leased, gale.FailClosed
	cfg.Lease = gale.LeaseConfig{Batch: fed.Batch}
	if fed.Timeout > 0 {
		cfg.StoreTimeout = fed.Timeout
	}
	return gale.New(fed.Store, cfg)
}

// limiterConfig is the gale configuration of r's limiter.
func (e *Engine) limiterConfig(r *rule, pd *policy.Descriptor) gale.Config {
	cfg := gale.Config{
		Rule:         r.galeRule,
		MaxKeys:      e.opts.MaxKeys,
		StoreTimeout: e.opts.StoreTimeout,
		Clock:        e.opts.Clock,
	}
	switch pd.Mode {
	case policy.CachedDeny:
		cfg.Mode = gale.CachedDeny
	case policy.Leased:
		cfg.Mode = gale.Leased
		cfg.Lease = gale.LeaseConfig{
			Batch:           int64(pd.Lease.Batch),
			Uncoupled:       !pd.Lease.WindowCoupled,
			LowWater:        int64(pd.Lease.LowWater),
			ReturnIdleAfter: pd.Lease.ReturnIdleAfter,
		}
		if pd.Lease.Auto {
			// newRule validated the rule and the costs are positive, so
			// this cannot fail; keep the default batch if it ever does.
			if f, err := newSizer(r.galeRule, pd.Lease); err == nil {
				cfg.Lease.NewSizer = f
			}
		}
	}
	cfg.OnStoreError = errorPolicy(pd.OnStoreError)
	return cfg
}

// errorPolicy is gale's name for an on_store_error policy.
func errorPolicy(p policy.StoreErrorPolicy) gale.ErrorPolicy {
	switch p {
	case policy.OnErrorAllow:
		return gale.FailOpen
	case policy.OnErrorDeny:
		return gale.FailClosed
	}
	return gale.FailError
}
