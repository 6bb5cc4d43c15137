package engine

import (
	"context"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// hit is one limit applied to one request descriptor.
type hit struct {
	desc   int
	r      *rule     // nil for a limit override carried by the request
	ov     gale.Rule // the override's rule
	ovInfo LimitInfo
	key    string
	tenant string // the tenant of a fair rule
	cost   int64
	d      gale.Decision
	over   bool // the limit denied
	took   bool // units were taken, and are refunded if the request is denied
	status Status
}

func (h *hit) shadow() bool { return h.r != nil && h.r.shadow }
func (h *hit) quota() bool  { return h.r != nil && h.r.quota && !h.r.shadow }

// capacity is the most h's limit admits at once: a status never reports
// more remaining.
func (h *hit) capacity() int64 {
	if h.r != nil {
		return h.r.galeRule.Capacity()
	}
	return h.ov.Capacity()
}

// Decide answers req at now (stamped once by the caller). It returns an
// error wrapping ErrInvalidRequest for a malformed request, and the store's
// error (wrapping gale.ErrStore) when a limit whose policy is "error" cannot
// reach the store; then nothing the request took is kept.
func (e *Engine) Decide(ctx context.Context, req *Request, now time.Time) (*Response, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	c := e.cur.Load()
	if c.domains[req.Domain] == nil {
		e.noteUnknownDomain(req.Domain, now)
	}
	for attempt := 0; ; attempt++ {
		resp, err := e.decide(ctx, c, req, now)
		// A reload retired a limiter while this request used it: answer
		// again from the policy now in place.
		if errors.Is(err, gale.ErrClosed) && attempt < 3 {
			c = e.cur.Load()
			continue
		}
		return resp, err
	}
}

func (e *Engine) decide(ctx context.Context, c *compiled, req *Request, now time.Time) (*Response, error) {
	hits := e.match(c, req)
	hits = applyReplaces(hits)
	if len(hits) > 1 {
		// --store-timeout bounds the request, not each store call: its
		// limits share one deadline instead of waiting a timeout each,
		// so the answer comes inside Envoy's call timeout and every
		// limit's on_store_error decides, not Envoy's failure mode.
		ctx = gale.WithStoreBudget(ctx, time.Now().Add(e.storeTimeout()))
	}
	// Fair limits cannot give units back, so they are asked last, and only
	// when no other limit has already denied the request.
	isFair := func(h *hit) bool { return h.r != nil && h.r.fair != nil }
	denied := false
	for j := range hits {
		h := &hits[j]
		if isFair(h) {
			continue
		}
		if err := e.evaluate(ctx, req, h, now); err != nil {
			e.refund(ctx, hits, now)
			return nil, err
		}
		denied = denied || (h.over && !h.shadow() && !h.quota())
	}
	for j := range hits {
		h := &hits[j]
		switch {
		case !isFair(h):
		case denied:
			h.status = Status{Code: CodeOK, Limit: &h.r.info} // not asked: the request is denied anyway
		default:
			if err := e.evaluate(ctx, req, h, now); err != nil {
				e.refund(ctx, hits, now)
				return nil, err
			}
		}
	}
	resp := &Response{Code: CodeOK, Statuses: make([]Status, len(req.Descriptors)), HeaderStatus: -1}
	hard := false
	var quotaDescs, quotaOver map[int]bool
	for j := range hits {
		h := &hits[j]
		switch {
		case h.quota():
			if quotaDescs == nil {
				quotaDescs, quotaOver = map[int]bool{}, map[int]bool{}
			}
			quotaDescs[h.desc] = true
			if h.over {
				quotaOver[h.desc] = true
			}
		case h.over && !h.shadow():
			hard = true
		}
	}
	if len(quotaDescs) > 0 {
		resp.QuotaMode = true
		for i := range req.Descriptors {
			if quotaOver[i] {
				resp.QuotaViolations = append(resp.QuotaViolations, i)
			}
		}
	}
	if hard || (len(quotaDescs) > 0 && len(quotaOver) == len(quotaDescs)) {
		resp.Code = CodeOverLimit
		e.refund(ctx, hits, now)
	}
	e.statuses(req, hits, resp)
	e.record(req, hits)
	return resp, nil
}

// match finds every limit that applies to each descriptor of req.
func (e *Engine) match(c *compiled, req *Request) []hit {
	hits := make([]hit, 0, len(req.Descriptors))
	root := c.domains[req.Domain]
	var path []*branch
	keys := make([]string, 0, MaxEntries)
	values := make([]string, 0, MaxEntries)
	buf := make([]byte, 0, 128)
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		cost := req.cost(d)
		keys, values = keys[:0], values[:0]
		if o := d.Override; o != nil {
			for _, en := range d.Entries {
				keys, values = append(keys, en.Key), append(values, en.Value)
			}
			h := hit{desc: i, cost: cost, ovInfo: LimitInfo{Unit: o.Unit, RequestsPerUnit: o.RequestsPerUnit, UnitMultiplier: 1}}
			h.ov = gale.Rule{Algorithm: gale.FixedWindow, Limit: int64(o.RequestsPerUnit), Period: o.Unit.Duration()}
			h.key = counterKey(buf, req.Domain, "override:"+string(o.Unit)+":"+strconv.FormatUint(uint64(o.RequestsPerUnit), 10), keys, values)
			hits = append(hits, h)
			continue
		}
		if root == nil {
			continue
		}
		var b *branch
		b, path = root.match(d.Entries, path[:0])
		if b == nil {
			continue
		}
		for k, en := range d.Entries {
			v := en.Value
			if path[k].share {
				v = path[k].value
			}
			keys, values = append(keys, en.Key), append(values, v)
		}
		for _, r := range b.rules {
			h := hit{desc: i, r: r, cost: cost}
			switch {
			case r.fair != nil:
				// One counter for every tenant: the tenant's value is left
				// out of the key and decides the share instead.
				lv := r.fair.level
				h.tenant, values[lv] = values[lv], ""
				h.key = counterKey(buf, req.Domain, r.id, keys, values)
				values[lv] = h.tenant
			case r.limiter != nil:
				h.key = counterKey(buf, req.Domain, r.id, keys, values)
			}
			hits = append(hits, h)
		}
	}
	return hits
}

// applyReplaces drops every limit that another applying limit replaces (by
// name), as envoyproxy/ratelimit does.
func applyReplaces(hits []hit) []hit {
	var replaced map[string]bool
	for _, h := range hits {
		if h.r != nil {
			for _, n := range h.r.replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[n] = true
			}
		}
	}
	if replaced == nil {
		return hits
	}
	kept := hits[:0]
	for _, h := range hits {
		if h.r == nil || h.r.name == "" || !replaced[h.r.name] {
			kept = append(kept, h)
		}
	}
	return kept
}

// evaluate asks h's limit.
func (e *Engine) evaluate(ctx context.Context, req *Request, h *hit, now time.Time) error {
	info := h.ovInfo
	if h.r != nil {
		info = h.r.info
	}
	switch {
	case h.r != nil && h.r.unlimited:
		// As envoyproxy/ratelimit: OK, no current limit, MaxUint32 remaining.
		h.status = Status{Code: CodeOK, Remaining: math.MaxUint32}
		return nil
	case (h.r != nil && h.r.blocked) || (h.r == nil && h.ov.Limit == 0):
		// Nothing is counted: the reset reported is the end of the unit's
		// window, on Unix time as every counted limit's window is
		// (time.Truncate would align it on Go's zero time instead).
		window := h.ov
		if h.r != nil {
			window = gale.Rule{Algorithm: gale.FixedWindow, Period: h.r.info.Unit.Duration() * time.Duration(h.r.info.UnitMultiplier)}
		}
		_, end := window.WindowBounds(now.UnixMicro())
		h.over = true
		h.status = Status{Code: CodeOverLimit, Limit: &info, UntilReset: time.UnixMicro(end).Sub(now)}
		return nil
	case req.Descriptors[h.desc].Negative:
		h.status = Status{Code: CodeOK, Limit: &info}
		return e.giveBack(ctx, h, now)
	}
	var d gale.Decision
	var err error
	if h.r != nil && h.r.fair != nil {
		return e.evaluateFair(ctx, h, &info, now)
	}
	if h.r != nil {
		d, err = h.r.limiter.Check(ctx, h.key, h.cost, now)
	} else {
		sctx, cancel := gale.StoreContext(ctx, e.storeTimeout())
		d, err = e.store.Check(sctx, h.key, h.ov, h.cost, now)
		cancel()
		if err != nil && ctx.Err() == nil {
			err = errors.Join(gale.ErrStore, err)
		}
	}
	if err != nil {
		return err
	}
	h.d, h.took, h.over = d, d.Allowed && !d.Fallback, !d.Allowed
	h.status = Status{Code: CodeOK, Limit: &info, Remaining: clampUint32(d.Remaining), UntilReset: max(d.ResetAt.Sub(now), 0)}
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

// giveBack applies a negative hit: units the key consumed in the window in
// place at now go back to it, never more than it consumed (gale's
// Limiter.GiveBack; for a request's override limit, the store's count).
func (e *Engine) giveBack(ctx context.Context, h *hit, now time.Time) error {
	if h.r != nil {
		_, err := h.r.limiter.GiveBack(ctx, h.key, h.cost, now)
		return err
	}
	var end time.Time
	if _, we := h.ov.WindowBounds(now.UnixMicro()); we != 0 {
		end = time.UnixMicro(we)
	}
	sctx, cancel := gale.StoreContext(ctx, e.storeTimeout())
	defer cancel()
	return e.store.Return(sctx, h.key, h.ov, h.cost, end, now)
}

// refund gives back what the hits took: the request is not admitted (or
// failed), so it consumes nothing. Refund failures only under-admit; they
// are logged, not returned.
func (e *Engine) refund(ctx context.Context, hits []hit, now time.Time) {
	for j := range hits {
		h := &hits[j]
		if !h.took {
			continue
		}
		h.took = false
		var err error
		if h.r != nil {
			err = h.r.limiter.Refund(ctx, h.key, h.cost, h.d, now)
		} else {
			sctx, cancel := gale.StoreContext(ctx, e.storeTimeout())
			err = e.store.Return(sctx, h.key, h.ov, h.cost, h.d.WindowEnd, now)
			cancel()
		}
		if err != nil {
			e.log.Warn("refund failed: the request's other limits keep its units until their window ends", "err", err)
			continue
		}
		h.status.Remaining = clampUint32(min(int64(h.status.Remaining)+h.cost, h.capacity()))
	}
}

// statuses picks each descriptor's status — an over-limit one first, then
// the one with the least remaining — and the one the headers report.
func (e *Engine) statuses(req *Request, hits []hit, resp *Response) {
	chosen := make([]*hit, len(req.Descriptors))
	for j := range hits {
		h := &hits[j]
		if cur := chosen[h.desc]; cur == nil || closer(&h.status, &cur.status) {
			chosen[h.desc] = h
		}
	}
	for i, h := range chosen {
		if h == nil {
			resp.Statuses[i] = Status{Code: CodeOK}
			continue
		}
		resp.Statuses[i] = h.status
		if h.status.Limit == nil {
			continue // unlimited: nothing to put in the RateLimit-* headers
		}
		if resp.HeaderStatus < 0 || closer(&h.status, &resp.Statuses[resp.HeaderStatus]) {
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
