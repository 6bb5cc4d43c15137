package engine

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// hit is one limit applied to one request descriptor.
type hit struct {
	r      *rule // a policy rule, or the rule of a request's override
	desc   int
	key    []byte // the counter key, in the request's scratch arena
	cost   int64
	charge bool // counted in full even past the limit, never refunded (Descriptor.HitsAddend)
	d      gale.Decision
	over   bool // the limit denied
	took   bool // units were taken, and are refunded if the request is denied
	status Status
}

func (h *hit) shadow() bool { return h.r.shadow }
func (h *hit) quota() bool  { return h.r.quota && !h.r.shadow }
func (h *hit) fair() bool   { return h.r.fair != nil }

// scratch is one request's working memory, pooled: a request allocates
// none of it.
type scratch struct {
	hits   []hit
	keys   []string // one descriptor's entry keys
	values []string // and values, as its rule counts them
	path   []*branch
	buf    []byte  // the counter keys of the request's hits, one after another
	chosen []int32 // per descriptor: the hit its status comes from, or -1
	quota  []uint8 // per descriptor: quotaApplies | quotaOver
	held   []*overrideRule
}

const (
	quotaApplies = 1 << iota
	quotaOver
)

var scratchPool = sync.Pool{New: func() any {
	return &scratch{keys: make([]string, 0, MaxEntries), values: make([]string, 0, MaxEntries), buf: make([]byte, 0, 128)}
}}

// put returns s to the pool, dropping the hits' keys and decisions and the
// override rules. (keys, values and path keep pointing into the last
// request until the next overwrites them.)
func (s *scratch) put() {
	clear(s.hits)
	clear(s.held)
	s.hits, s.held, s.buf = s.hits[:0], s.held[:0], s.buf[:0]
	scratchPool.Put(s)
}

// Decide answers req at now (stamped once by the caller). It returns an
// error wrapping ErrInvalidRequest for a malformed request, and the store's
// error (wrapping gale.ErrStore and ratelimit.ErrStore) when a limit whose policy is "error" cannot
// reach the store; then nothing the request took is kept.
func (e *Engine) Decide(ctx context.Context, req *Request, now time.Time) (*Response, error) {
	resp := &Response{}
	if err := e.DecideInto(ctx, req, now, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// DecideInto is Decide writing its answer into resp, whose Statuses and
// QuotaViolations it reuses (resetting every field): a caller that keeps
// its Responses (a sync.Pool of them, say) answers a request without
// allocating one. On error resp holds nothing of use.
func (e *Engine) DecideInto(ctx context.Context, req *Request, now time.Time, resp *Response) error {
	return e.run(ctx, req, now, resp, nil)
}

func (e *Engine) decide(ctx context.Context, s *scratch, req *Request, now time.Time, resp *Response) error {
	hits := s.hits
	if len(hits) > 1 {
		// --store-timeout bounds the request, not each store call: its
		// limits share one deadline instead of waiting a timeout each,
		// so the answer comes inside Envoy's call timeout and every
		// limit's on_store_error decides, not Envoy's failure mode.
		// A federated limit's lease crosses regions: its own, longer
		// timeout widens the request's budget.
		budget := e.storeTimeout()
		for j := range hits {
			budget = max(budget, hits[j].r.timeout)
		}
		ctx = gale.WithStoreBudget(ctx, time.Now().Add(budget))
	}
	// Fair limits cannot give units back, so they are asked last, and only
	// when no other limit has already denied the request.
	denied := false
	for j := range hits {
		h := &hits[j]
		if h.fair() {
			continue
		}
		if err := e.evaluate(ctx, req, h, now); err != nil {
			e.refund(ctx, hits, now)
			return err
		}
		denied = denied || (h.over && !h.shadow() && !h.quota())
	}
	for j := range hits {
		h := &hits[j]
		switch {
		case !h.fair():
		case denied:
			h.status = Status{Code: CodeOK, Limit: &h.r.info} // not asked: the request is denied anyway
		default:
			if err := e.evaluate(ctx, req, h, now); err != nil {
				e.refund(ctx, hits, now)
				return err
			}
		}
	}
	statuses := resp.Statuses[:0]
	if cap(statuses) < len(req.Descriptors) {
		statuses = make([]Status, 0, len(req.Descriptors))
	}
	*resp = Response{Code: CodeOK, Statuses: statuses, HeaderStatus: -1, QuotaViolations: resp.QuotaViolations[:0]}
	hard := false
	s.quota = s.quota[:0]
	quotas, quotasOver := 0, 0
	for j := range hits {
		h := &hits[j]
		switch {
		case h.quota():
			if len(s.quota) == 0 {
				s.quota = slices.Grow(s.quota, len(req.Descriptors))[:len(req.Descriptors)]
				clear(s.quota)
			}
			q := &s.quota[h.desc]
			if *q&quotaApplies == 0 {
				quotas++
			}
			if h.over && *q&quotaOver == 0 {
				quotasOver++
				*q |= quotaOver
			}
			*q |= quotaApplies
		case h.over && !h.shadow():
			hard = true
		}
	}
	if quotas > 0 {
		resp.QuotaMode = true
		for i, q := range s.quota {
			if q&quotaOver != 0 {
				resp.QuotaViolations = append(resp.QuotaViolations, i)
			}
		}
	}
	if hard || (quotas > 0 && quotasOver == quotas) {
		resp.Code = CodeOverLimit
		e.refund(ctx, hits, now)
	}
	e.statuses(s, req, resp)
	e.record(req, hits)
	if req.Trace != nil {
		traceHits(req.Trace, req, hits)
	}
	return nil
}

// traceHits writes what the hits did into t.
func traceHits(t *Trace, req *Request, hits []hit) {
	t.Limits, t.StoreTrips = t.Limits[:0], 0
	for j := range hits {
		h := &hits[j]
		tl := TracedLimit{
			Descriptor: h.desc, Rule: h.r.ref, Mode: h.r.mode, Algorithm: h.r.algorithm,
			Code: CodeOK, Shadow: h.shadow(), StoreTrips: int(h.d.Trips), Fallback: h.d.Fallback,
			Refunded: h.d.Allowed && !h.d.Fallback && !h.took && !h.charge,
		}
		if h.over {
			tl.Code = CodeOverLimit
		}
		if req.Descriptors[h.desc].Negative && h.cost > 0 && h.r.lim != nil && h.r.mode != policy.Leased {
			tl.StoreTrips = 1
		}
		t.StoreTrips += tl.StoreTrips
		t.Limits = append(t.Limits, tl)
	}
}

// match finds every limit that applies to each descriptor of req, in s.hits,
// with root the tree of req's domain (nil: none). The rules of the
// descriptors' overrides it takes are held in s.held until
// done.
func (e *Engine) match(s *scratch, root *node, req *Request) error {
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		cost, charge := requestCost(req, d)
		keys, values := s.keys[:0], s.values[:0]
		if o := d.Override; o != nil {
			r, err := e.acquireOverride(*o)
			if err != nil {
				return err
			}
			s.held = append(s.held, r)
			for _, en := range d.Entries {
				keys, values = append(keys, en.Key), append(values, en.Value)
			}
			at := len(s.buf)
			s.buf = appendKey(s.buf, req.Domain, r.id, keys, values)
			s.hits = append(s.hits, hit{desc: i, r: &r.rule, cost: cost, charge: charge, key: s.buf[at:len(s.buf):len(s.buf)]})
			continue
		}
		if root == nil {
			continue
		}
		var b *branch
		b, s.path = root.match(d.Entries, s.path[:0])
		if b == nil {
			continue
		}
		for k, en := range d.Entries {
			v := en.Value
			if s.path[k].share {
				v = s.path[k].value
			}
			values = append(values, v)
		}
		for _, r := range b.rules {
			h := hit{desc: i, r: r, cost: cost, charge: charge}
			switch {
			case r.fair != nil:
				// One counter for every tenant: the tenant's value is left
				// out of the counter's key and decides the share instead.
				lv := r.fair.level
				tenant := values[lv]
				values[lv] = ""
				at := len(s.buf)
				s.buf = appendRuleKey(s.buf, r.keyPrefix, s.path, values)
				s.buf = appendField(s.buf, tenant)
				values[lv] = tenant
				h.key = s.buf[at:len(s.buf):len(s.buf)]
			case r.lim != nil:
				at := len(s.buf)
				s.buf = appendRuleKey(s.buf, r.keyPrefix, s.path, values)
				h.key = s.buf[at:len(s.buf):len(s.buf)]
			}
			s.hits = append(s.hits, h)
		}
	}
	return nil
}

// done ends a request: it releases the override rules match took and the
// policy, and returns s to the pool.
func (e *Engine) done(c *compiled, s *scratch) {
	for _, r := range s.held {
		e.releaseOverride(r)
	}
	s.put()
	c.release()
}

// applyReplaces drops every limit that another applying limit replaces (by
// name), as envoyproxy/ratelimit does.
func applyReplaces(hits []hit) []hit {
	var replaced map[string]bool
	for j := range hits {
		replaced = hits[j].r.noteReplaces(replaced)
	}
	if replaced == nil {
		return hits
	}
	kept := hits[:0]
	for _, h := range hits {
		if !h.r.replacedIn(replaced) {
			kept = append(kept, h)
		}
	}
	clear(hits[len(kept):])
	return kept
}

// noteReplaces adds the names of the limits r replaces to replaced, made on
// first use (nil while no limit replaces another).
func (r *rule) noteReplaces(replaced map[string]bool) map[string]bool {
	for _, n := range r.replaces {
		if replaced == nil {
			replaced = map[string]bool{}
		}
		replaced[n] = true
	}
	return replaced
}

// replacedIn reports whether another applying limit replaces r.
func (r *rule) replacedIn(replaced map[string]bool) bool {
	return r.name != "" && replaced[r.name]
}

// evaluate asks h's limit.
func (e *Engine) evaluate(ctx context.Context, req *Request, h *hit, now time.Time) error {
	r := h.r
	switch {
	case r.unlimited:
		// As envoyproxy/ratelimit: OK, no current limit, MaxUint32 remaining.
		h.status = Status{Code: CodeOK, Remaining: math.MaxUint32}
		return nil
	case r.blocked:
		// Nothing is counted: the reset reported is the end of the unit's
		// window, on Unix time as every counted limit's window is
		// (time.Truncate would align it on Go's zero time instead).
		window := gale.Rule{Algorithm: gale.FixedWindow, Period: r.info.Unit.Duration() * time.Duration(r.info.UnitMultiplier)}
		_, end := window.WindowBounds(now.UnixMicro())
		h.over = true
		h.status = Status{Code: CodeOverLimit, Limit: &r.info, UntilReset: time.UnixMicro(end).Sub(now)}
		return nil
	case req.Descriptors[h.desc].Negative:
		// The units the key consumed in the window in place at now go
		// back, never more than it consumed.
		h.status = Status{Code: CodeOK, Limit: &r.info}
		if h.cost == 0 {
			return nil // a hits_addend of 0 gives nothing back
		}
		_, err := r.lim.GiveBack(ctx, string(h.key), h.cost, now)
		return err
	}
	var d gale.Decision
	var err error
	if h.charge {
		d, err = r.lim.ChargeBytes(ctx, h.key, h.cost, now)
	} else {
		d, err = r.lim.CheckBytes(ctx, h.key, h.cost, now)
	}
	if err != nil {
		return err
	}
	// A charge is counted whatever the request's answer: it is never
	// refunded.
	h.d, h.took, h.over = d, d.Allowed && !d.Fallback && !h.charge, !d.Allowed
	h.status = Status{Code: CodeOK, Limit: &r.info, Remaining: clampUint32(d.Remaining), UntilReset: max(d.ResetAt.Sub(now), 0)}
	if h.over {
		h.status.Remaining = 0 // as envoyproxy/ratelimit reports an exhausted limit
		if !h.shadow() {
			// A denial says when the same request fits (Envoy's
			// X-RateLimit-Reset), not when the whole limit is back: for a
			// sliding window, GCRA or a bucket that is sooner, or later
			// than the current window's end.
			h.status.Code, h.status.UntilReset = CodeOverLimit, d.RetryAfter
		}
	}
	return nil
}

// refund gives back what the hits took, each to the window its decision
// names: the request is not admitted (or failed), so it consumes nothing.
// Refund failures only under-admit; they are logged, not returned.
func (e *Engine) refund(ctx context.Context, hits []hit, now time.Time) {
	for j := range hits {
		h := &hits[j]
		if !h.took {
			continue
		}
		h.took = false
		err := h.r.lim.Refund(ctx, string(h.key), h.cost, h.d, now)
		if errors.Is(err, errNoRefund) {
			continue
		}
		if err != nil {
			e.log.Warn("refund failed: the request's other limits keep its units until their window ends", "err", err)
			continue
		}
		h.status.Remaining = clampUint32(min(int64(h.status.Remaining)+h.cost, h.r.galeRule.Capacity()))
	}
}

// statuses picks each descriptor's status — an over-limit one first, then
// the one with the least remaining — and the one the headers report.
func (e *Engine) statuses(s *scratch, req *Request, resp *Response) {
	hits := s.hits
	s.chosen = s.chosen[:0]
	for range req.Descriptors {
		s.chosen = append(s.chosen, -1)
	}
	for j := range hits {
		h := &hits[j]
		if cur := s.chosen[h.desc]; cur < 0 || closer(&h.status, &hits[cur].status) {
			s.chosen[h.desc] = int32(j)
		}
	}
	for i, j := range s.chosen {
		if j < 0 {
			resp.Statuses = append(resp.Statuses, Status{Code: CodeOK})
			continue
		}
		st := &hits[j].status
		resp.Statuses = append(resp.Statuses, *st)
		if st.Limit == nil {
			continue // unlimited: nothing to put in the RateLimit-* headers
		}
		if resp.HeaderStatus < 0 || closer(st, &resp.Statuses[resp.HeaderStatus]) {
			resp.HeaderStatus = i
		}
	}
}

// closer reports whether a is nearer its limit than b. Of two OVER_LIMIT
// statuses, the one that fits later is: a request retried then fits both.
func closer(a, b *Status) bool {
	if (a.Code == CodeOverLimit) != (b.Code == CodeOverLimit) {
		return a.Code == CodeOverLimit
	}
	if a.Code == CodeOverLimit {
		return a.UntilReset > b.UntilReset
	}
	return a.Remaining < b.Remaining
}

func (e *Engine) storeTimeout() time.Duration {
	if e.opts.StoreTimeout > 0 {
		return e.opts.StoreTimeout
	}
	return gale.DefaultStoreTimeout
}

func clampUint32(n int64) uint32 {
	if n < 0 {
		return 0
	}
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}
