package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// MaxOverrideRules bounds the distinct limits (unit, requests per unit) that
// requests' descriptor overrides may carry at once: each has a strict
// limiter of its own. Past it, the least recently used is dropped.
const MaxOverrideRules = 256

// errEngineClosed is returned by Decide after Close.
var errEngineClosed = errors.New("engine: closed")

// overrides holds the rules of the limits requests carry (Envoy's
// descriptor limit override): a fixed window of the override's unit, strict,
// keyed by the descriptor's entries. A rule is made on first use and shared
// by every request carrying the same limit; it is answered by a strict
// gale.Limiter like a policy rule, so the store call, its timeout and the
// error wrapping are gale's. The zero value is ready; it is safe for
// concurrent use.
type overrides struct {
	mu     sync.Mutex
	byKey  map[Override]*overrideRule // at most MaxOverrideRules
	tick   uint64                     // the clock of lastUse
	closed bool
}

// overrideRule is the rule of one override limit, and who uses it.
type overrideRule struct {
	rule
	// refs counts the requests holding the rule (acquire without release
	// yet); its limiter is closed only once the rule is dropped and refs is
	// 0. Guarded by overrides.mu, as are lastUse and dropped.
	refs    int
	lastUse uint64
	dropped bool
}

// newOverrideRule builds the rule of o. A limit of 0 is blocked: nothing is
// counted, every request is over.
func (e *Engine) newOverrideRule(o Override) (*overrideRule, error) {
	r := &overrideRule{rule: rule{
		info: LimitInfo{Unit: o.Unit, RequestsPerUnit: o.RequestsPerUnit, UnitMultiplier: 1},
		id:   "override:" + string(o.Unit) + ":" + strconv.FormatUint(uint64(o.RequestsPerUnit), 10),
		ref:  RuleRef{Name: "override"},
		mode: policy.Strict,
	}}
	if o.RequestsPerUnit == 0 {
		r.blocked = true
		return r, nil
	}
	r.galeRule = gale.Rule{Algorithm: gale.FixedWindow, Limit: int64(o.RequestsPerUnit), Period: o.Unit.Duration()}
	r.algorithm = policy.FixedWindow
	lim, err := gale.New(e.store, gale.Config{Rule: r.galeRule, StoreTimeout: e.opts.StoreTimeout, Clock: e.opts.Clock})
	if err != nil {
		return nil, err
	}
	r.limiter, r.lim = lim, lim
	return r, nil
}

// acquireOverride returns the rule of o, held until release.
func (e *Engine) acquireOverride(o Override) (*overrideRule, error) {
	v := &e.overrides
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return nil, errEngineClosed
	}
	v.tick++
	r := v.byKey[o]
	if r == nil {
		var err error
		if r, err = e.newOverrideRule(o); err != nil {
			return nil, err
		}
		if v.byKey == nil {
			v.byKey = map[Override]*overrideRule{}
		}
		if len(v.byKey) >= MaxOverrideRules {
			v.dropLRU()
		}
		v.byKey[o] = r
	}
	r.refs++
	r.lastUse = v.tick
	return r, nil
}

// dropLRU drops the least recently used rule. Called with v.mu held; the
// scan is O(MaxOverrideRules), paid only by a request bringing a new limit
// into a full cache.
func (v *overrides) dropLRU() {
	var oldest Override
	var at *overrideRule
	for o, r := range v.byKey {
		if at == nil || r.lastUse < at.lastUse {
			oldest, at = o, r
		}
	}
	if at != nil {
		delete(v.byKey, oldest)
		v.drop(at)
	}
}

// drop marks r dropped and closes its limiter if no request holds it (else
// the last release does). Called with v.mu held: a strict limiter's Close
// makes no store call.
func (v *overrides) drop(r *overrideRule) {
	r.dropped = true
	if r.refs == 0 && r.limiter != nil {
		_ = r.limiter.Close(context.Background()) // strict: Close returns no credits, so makes no store call
	}
}

// releaseOverride ends a request's hold on r.
func (e *Engine) releaseOverride(r *overrideRule) {
	v := &e.overrides
	v.mu.Lock()
	defer v.mu.Unlock()
	r.refs--
	if r.dropped && r.refs == 0 && r.limiter != nil {
		_ = r.limiter.Close(context.Background()) // as in drop
	}
}

// close drops every rule; acquire fails from now on.
func (v *overrides) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	for o, r := range v.byKey {
		delete(v.byKey, o)
		v.drop(r)
	}
}
