package rlqsserver

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// A bucket may count against several limits (one descriptor, several
// rate_limits): every unit assigned is leased from each of them, and every
// assignment must expire before each of the windows its units came from
// ends. The machine runs on the limit with the shortest window (its
// Limit is the smallest of the limits); each lease it asks is taken from
// that limit first, then, up to what it granted, from each other limit in
// turn. What the smallest grant does not cover goes straight back to the
// limits that granted more. The window the machine is handed ends when the
// first of the windows leased from ends, so every TTL ends before each of
// them. (With windows that nest, as a minute in an hour, that is the
// shortest limit's own window.)

// machineFirst orders limits for the machine: the shortest window first
// (ties: the smallest limit), the rest in policy order.
func machineFirst(limits []ratelimit.QuotaLimit) []ratelimit.QuotaLimit {
	out := slices.Clone(limits)
	first := 0
	for i, l := range out {
		if c := cmp.Compare(l.Window, out[first].Window); c < 0 || c == 0 && l.Limit < out[first].Limit {
			first = i
		}
	}
	out[0], out[first] = out[first], out[0]
	return out
}

// sameCounters reports whether a and b are the same counters with the
// same windows, in the same order.
func sameCounters(a, b []ratelimit.QuotaLimit) bool {
	return slices.EqualFunc(a, b, func(x, y ratelimit.QuotaLimit) bool { return x.Key == y.Key && x.Window == y.Window })
}

// rule names the bucket in metrics: its machine's limit.
func (b *bucket) rule() ratelimit.RuleRef {
	if len(b.limits) == 0 {
		return ratelimit.RuleRef{}
	}
	return b.limits[0].Rule
}

// leaseAll leases ask from every limit at sent: the machine's limit for
// ask.Min..ask.Max, each other for 1..what the previous granted. It
// returns the grant the machine lands (in its limit's store clock, its
// window ending with the first window leased from) and each limit's grant
// trimmed to it; the excess is given back. On a failure nothing is kept.
// With share, the machine's limit is asked no more than this sidecar's
// fair share of the window beyond the held units it has (fairShare), and
// shared reports that the share sized the lease (or refused it): the
// bucket's later leases in the window are first come.
func (b *bucket) leaseAll(ctx context.Context, limits []ratelimit.QuotaLimit, ask rlqs.LeaseAsk, sent time.Time, held int64, share bool) (_ gale.Grant, _ []ratelimit.QuotaGrant, shared bool, _ error) {
	parts := make([]ratelimit.QuotaGrant, len(limits))
	n, asked := ask.Max, 0
	if share {
		if fair, wait, ok := b.fairShare(ctx, limits[0], ask, sent, held); ok {
			if wait > 0 {
				// A sidecar that leased last window has not announced
				// in this one yet: wait for it, but no longer than the
				// ledger's early part of the window (a dead one's share
				// is not kept for it).
				return gale.Grant{Decision: gale.Decision{RetryAfter: wait}}, nil, false, nil
			}
			if fair < ask.Min {
				// This sidecar holds its share: it asks again later,
				// first come, for what the others leave.
				return gale.Grant{Decision: gale.Decision{RetryAfter: fairRetry}}, nil, true, nil
			}
			n, shared = min(n, fair), true
		}
	}
	var retry time.Duration
	var err error
	for i, l := range limits {
		lo := int64(1)
		if i == 0 {
			lo = ask.Min
		}
		var g ratelimit.QuotaGrant
		if g, err = l.Leaser.Lease(ctx, l.Key, min(lo, n), n, sent); err != nil {
			break
		}
		asked++
		parts[i] = g
		b.srv.stats.rule(l.Rule, func(r *RuleStats) { r.Leased += g.Granted })
		if g.Granted == 0 {
			n, retry = 0, g.RetryAfter
			break
		}
		n = min(n, g.Granted)
	}
	if err != nil {
		n = 0
	}
	for i := range asked {
		if extra := parts[i].Granted - n; extra > 0 {
			b.returnUnits(limits[i], extra, parts[i], sent)
		}
		parts[i].Granted = n
	}
	if err != nil {
		return gale.Grant{}, nil, shared, err
	}
	first := parts[0]
	g := gale.Grant{Granted: n, WindowEnd: first.StoreWindowEnd, Now: first.StoreNow, Decision: gale.Decision{RetryAfter: retry}}
	if n > 0 {
		end := first.WindowEnd
		for _, p := range parts[1:] {
			if p.WindowEnd.Before(end) {
				end = p.WindowEnd
			}
		}
		g.WindowEnd = first.StoreWindowEnd.Add(-first.WindowEnd.Sub(end))
	}
	return g, parts, shared, nil
}

// fairRetry is how long a sidecar holding its fair share of a window waits
// before it asks again, first come: longer than the ledger's early part
// of a window, so that the others have leased their shares by then.
const fairRetry = time.Second

// fairShare is what this sidecar may lease of lim's window at sent beyond
// the held units it has already: its max-min share, by the demands the
// sidecars leasing the counter announce in the store's ledger, of lim's
// limit, less held. It announces held + ask.Max first. When a sidecar that
// leased in the window before has not announced in this one yet, wait is
// how long until the ledger stops telling of it (LedgerEarly past sent at
// the most): the lease should wait that long, not lease around it. ok is
// false when the store keeps no ledger or the announcement failed: the
// lease is then first come, as before the ledger (a sidecar whose Envoys'
// demand covered L took the whole window every window, and the other
// sidecars' Envoys got nothing).
func (b *bucket) fairShare(ctx context.Context, lim ratelimit.QuotaLimit, ask rlqs.LeaseAsk, sent time.Time, held int64) (share int64, wait time.Duration, ok bool) {
	a, ok := lim.Leaser.(ratelimit.QuotaAnnouncer)
	if !ok {
		return 0, 0, false
	}
	want := held + ask.Max
	demands, err := a.Announce(ctx, lim.Key, b.srv.opts.Member, want, sent)
	if err != nil {
		if !errors.Is(err, gale.ErrNoLedger) {
			b.srv.warns.warn(b.srv.log, b.srv.clk.Now(), "rlqs: announcing demand failed; leasing first come", b.domain, lim.Rule.Name, "err", err)
		}
		return 0, 0, false
	}
	if slices.ContainsFunc(demands, func(d ratelimit.QuotaDemand) bool { return d.Past }) {
		return 0, gale.LedgerEarly(lim.Window) + time.Millisecond, true
	}
	return max(fairShareOf(lim.Limit, demands, b.srv.opts.Member)-held, 0), 0, true
}

// fairShareOf is member own's max-min share of total units among demands
// (own's among them, by name; a member named twice counts once, its first
// entry), the remainder's +1s going to the smallest names (rlqs.MaxMin
// over the demands in name order): sidecars that read the same demands
// ask shares that add up to min(total, Σ demands). 0 when own is not
// among them.
//
// A window's L is shared among the sidecars leasing one counter by their
// Envoys' demand (gale.DemandLedger): first come, a sidecar whose Envoys'
// demand covered L took the whole window every window, and the other
// sidecars' Envoys got nothing (issue 41, item 9).
func fairShareOf(total int64, demands []ratelimit.QuotaDemand, own string) int64 {
	d := slices.Clone(demands)
	slices.SortStableFunc(d, func(a, b ratelimit.QuotaDemand) int { return cmp.Compare(a.Member, b.Member) })
	d = slices.CompactFunc(d, func(a, b ratelimit.QuotaDemand) bool { return a.Member == b.Member })
	i := slices.IndexFunc(d, func(x ratelimit.QuotaDemand) bool { return x.Member == own })
	if i < 0 {
		return 0
	}
	w := make([]int64, len(d))
	for j, x := range d {
		w[j] = x.Units
	}
	return rlqs.MaxMin(total, w)[i]
}

// giveBackLocked returns units the machine did not assign from its window
// ending at end to each limit's grant of that window.
func (b *bucket) giveBackLocked(units int64, end time.Time, now time.Time) {
	parts := b.windows[end]
	if len(parts) != len(b.limits) {
		// Not a window this bucket recorded (one machine, one limit):
		// the machine's own window is its limit's.
		b.returnUnits(b.limits[0], units, ratelimit.QuotaGrant{StoreWindowEnd: end}, now)
		return
	}
	for i, l := range b.limits {
		b.returnUnits(l, units, parts[i], now)
	}
}
