package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Reserve, then settle. Checking a request's cost before it runs and
// charging its real cost after leaves a hole: a burst of long requests all
// pass the check before any is charged, and the window overruns by up to
// (requests in flight) × (cost of one). A reservation closes it: the units
// are taken when the request starts, as an ordinary request of that cost
// (refused whole if they do not fit, taking nothing), and at the end the
// difference is settled — what was not used goes back to the window that
// counted it, and a cost above the reservation is charged in full, even
// past the limit.
//
// Bounds, per window of a fixed-window limit L, when every request's real
// cost is at most its cap C:
//   - reserving the cap (R = C): Σ real costs of the requests admitted in
//     a window ≤ what the window counted ≤ L. Nothing overruns.
//   - reserving R < C: what a window counts goes past L only by the extra
//     charged into it after its last admission, ≤ Σ (cost − R) over the
//     requests settled in it then, each at most C − R: so at most
//     (requests in flight at the window's last admission) × (C − R).
//     Leased and fair rules also admit, once the count is past L, from
//     the credits each node still holds (a batch, a cost leased for
//     itself, a refund given back to them; a fair rule's quantum):
//     internal/boundcheck judges every window so.

// Reservation is units a request took from its limits before it ran,
// waiting to be settled at its real cost. The policy it was decided by
// stays in use (its limiters open) until Settle. Settle it exactly once;
// it is safe for concurrent use, and a Settle after the first does
// nothing.
type Reservation struct {
	e       *Engine
	c       *compiled // acquired until Settle
	req     Request   // domain and descriptors, for the extra charge
	units   int64
	held    []heldUnits
	settled atomic.Bool
}

// heldUnits is one limit's share of a reservation: its rule, counter key
// and the decision that names the window the units were counted in.
type heldUnits struct {
	r   *rule
	key string
	d   gale.Decision
}

// costCounters are one rule's reservations and settlements, in units.
type costCounters struct {
	reserved, refunded, extra, overrun atomic.Int64
}

// CostStats is one rule's reservations and settlements, in units; counters
// kept across reloads.
type CostStats struct {
	Ref RuleRef
	// Reserved is the units reservations took from the rule.
	Reserved int64
	// Refunded is the units settlements gave back to the window that
	// reserved them (a refund whose window had ended is dropped, not
	// counted).
	Refunded int64
	// Extra is the units settlements charged beyond their reservation.
	Extra int64
	// Overrun is the extra of the settlements the rule answered OVER_LIMIT:
	// charges that took its window past its limit (at least as much as the
	// window went past it).
	Overrun int64
}

// Reserve takes req.HitsAddend units (0 means 1) of every limit req
// reaches at now, as Decide does: refused whole when they do not fit (the
// Response says OVER_LIMIT, with when they would, and the Reservation is
// nil), consuming nothing. Admitted, the Reservation holds the units until
// Settle. Its descriptors may carry no HitsAddend, negative hits or limit
// override (ErrInvalidRequest). Errors are Decide's.
func (e *Engine) Reserve(ctx context.Context, req *Request, now time.Time) (*Reservation, *Response, error) {
	for i := range req.Descriptors {
		if d := &req.Descriptors[i]; d.HitsAddend != nil || d.Negative || d.Override != nil {
			return nil, nil, fmt.Errorf("%w: descriptor %d of a reservation carries hits_addend, negative hits or a limit override (a reservation is HitsAddend units of the policy's limits)", ErrInvalidRequest, i)
		}
	}
	units := max(int64(req.HitsAddend), 1)
	resp := &Response{}
	var res *Reservation
	err := e.run(ctx, req, now, resp, func(c *compiled, hits []hit) bool {
		if resp.Code != CodeOK {
			return false
		}
		res = &Reservation{e: e, c: c, units: units, req: Request{Domain: req.Domain, Descriptors: make([]Descriptor, len(req.Descriptors))}}
		for i, d := range req.Descriptors {
			res.req.Descriptors[i] = Descriptor{Entries: append([]Entry(nil), d.Entries...)}
		}
		for j := range hits {
			h := &hits[j]
			if !h.took {
				continue
			}
			res.held = append(res.held, heldUnits{r: h.r, key: string(h.key), d: h.d})
			if h.r.stats != nil {
				h.r.stats.cost.reserved.Add(units)
			}
		}
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	return res, resp, nil
}

// Units is what the reservation holds.
func (r *Reservation) Units() int64 { return r.units }

// Settle ends the reservation at the request's real cost actual, at now.
// Below the reservation, the difference goes back to every limit, into the
// window that counted the reservation (dropped if that window has ended:
// a request can outlive its window, and a refund into the next one would
// over-admit); a limit that keeps what it admitted (a fair rule) gives
// nothing back. Above it, the difference is charged in the window in
// place at now, counted in full even past the limit (Over then). Equal,
// nothing moves. Refund failures only under-admit: they are logged. The
// error is the extra charge's (Decide's), or ErrInvalidRequest for a
// negative actual, which leaves the reservation as the cost.
func (r *Reservation) Settle(ctx context.Context, actual int64, now time.Time) (Settlement, error) {
	if r == nil || !r.settled.CompareAndSwap(false, true) {
		return Settlement{}, nil
	}
	defer r.c.release()
	switch {
	case actual < 0:
		return Settlement{}, fmt.Errorf("%w: a cost of %d (a cost is 0 or more); the reservation stands", ErrInvalidRequest, actual)
	case actual < r.units:
		n := r.units - actual
		r.refund(ctx, n, now)
		return Settlement{Refunded: n}, nil
	case actual > r.units:
		return r.charge(ctx, actual-r.units, now)
	}
	return Settlement{}, nil
}

// refund gives n units back to every limit that holds them.
func (r *Reservation) refund(ctx context.Context, n int64, now time.Time) {
	for _, h := range r.held {
		err := h.r.lim.Refund(ctx, h.key, n, h.d, now)
		switch {
		case errors.Is(err, errNoRefund):
		case err != nil:
			r.e.log.Warn("refunding a reservation failed: the limit keeps the units until its window ends", "domain", h.r.ref.Domain, "rule", h.r.ref.Name, "err", err)
		case h.r.stats != nil && (h.d.WindowEnd.IsZero() || now.Before(h.d.WindowEnd)):
			h.r.stats.cost.refunded.Add(n)
		}
	}
}

// charge counts extra units of the reservation's descriptors at now, as a
// charge (a non-nil HitsAddend): counted in full, OVER_LIMIT when it overran.
func (r *Reservation) charge(ctx context.Context, extra int64, now time.Time) (Settlement, error) {
	req := Request{Domain: r.req.Domain, Descriptors: make([]Descriptor, len(r.req.Descriptors))}
	addend := uint64(extra)
	for i, d := range r.req.Descriptors {
		d.HitsAddend = &addend
		req.Descriptors[i] = d
	}
	resp := &Response{}
	err := r.e.run(ctx, &req, now, resp, func(_ *compiled, hits []hit) bool {
		for j := range hits {
			h := &hits[j]
			if h.r.stats == nil || h.r.lim == nil || h.d.Fallback {
				continue
			}
			h.r.stats.cost.extra.Add(extra)
			if h.over {
				h.r.stats.cost.overrun.Add(extra)
			}
		}
		return false
	})
	if err != nil {
		return Settlement{}, err
	}
	return Settlement{Extra: extra, Over: resp.Code == CodeOverLimit}, nil
}

// run decides req at now into resp (DecideInto), then, when use is not
// nil, calls it with the policy and the decided hits before they go back
// to the pool. When use returns true the policy stays acquired, and the
// caller releases it.
func (e *Engine) run(ctx context.Context, req *Request, now time.Time, resp *Response, use func(c *compiled, hits []hit) bool) error {
	if err := validate(req); err != nil {
		return err
	}
	c, err := e.acquire()
	if err != nil {
		return err
	}
	s := scratchPool.Get().(*scratch)
	keep := false
	defer func() {
		if !keep {
			e.done(c, s)
			return
		}
		for _, o := range s.held {
			e.releaseOverride(o)
		}
		s.put()
	}()
	root := c.domains[req.Domain]
	if root == nil {
		e.noteUnknownDomain(req.Domain, now)
	}
	if err := e.match(s, root, req); err != nil {
		return err
	}
	s.hits = applyReplaces(s.hits)
	if err := e.decide(ctx, s, req, now, resp); err != nil {
		return asStoreFailure(err)
	}
	if use != nil {
		keep = use(c, s.hits)
	}
	return nil
}

// CostSnapshot reads the cost counters of every counted rule of the
// domains that have cost limits in the policy in use.
func (e *Engine) CostSnapshot() []CostStats {
	c := e.cur.Load()
	if len(c.costs) == 0 {
		return nil
	}
	domains := map[string]bool{}
	for _, cr := range c.costs {
		domains[cr.spec.Domain] = true
	}
	var out []CostStats
	for _, r := range c.rules {
		if !domains[r.ref.Domain] || r.stats == nil || r.lim == nil {
			continue
		}
		k := &r.stats.cost
		out = append(out, CostStats{Ref: r.ref, Reserved: k.reserved.Load(), Refunded: k.refunded.Load(), Extra: k.extra.Load(), Overrun: k.overrun.Load()})
	}
	return out
}
