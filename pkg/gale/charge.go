package gale

import (
	"fmt"
	"math"
	"time"
)

// Charges: a cost counted once it is known, in full, whether or not it fits.
//
// Envoy's cost-based limits (Envoy Gateway, Envoy AI Gateway's token
// budgets) ask twice per request: a check that counts nothing when the
// request starts, and, when its response is done, a charge of what it
// cost (the tokens an LLM used). The cost was spent whatever the budget
// said, so a charge is counted even past the limit — the state then stands
// in debt and denies until enough of it has drained or its window has
// ended — and its answer says whether it fit. envoyproxy/ratelimit answers
// them so (INCRBY, then OVER_LIMIT when the count after exceeds the limit);
// Take, which takes all or nothing, cannot.
//
// A debt is bounded so every instant and count stays exact in a double (the
// Redis store's Lua): a window counts at most maxCount units; a GCRA or
// token bucket stands at most maxDebtUS of drain time past empty; and the
// headroom reported never falls below minHeadroom. A debt stored under
// other figures (a reload) is read within the reading rule's bounds. Each
// bound is far past
// any limit: a charge past one still counts up to it and answers OVER_LIMIT.
const (
	maxCount    = 1 << 50
	maxDebtUS   = 2 * maxPeriodUS
	minHeadroom = -(1 << 52)
)

// Charge counts n ≥ 0 units of state s at now in full, even past the
// limit, and reports whether they fit. A charge fits when at least n units
// were available (Take would have granted them): it then leaves the state
// and answers exactly as Take(s, now, n, n) does. One that does not fit is
// counted all the same, Over is set, Overrun is the units counted past the
// limit, Remaining is 0 and RetryAfter the time until a check-only charge
// fits again.
//
// n = 0 is a check-only charge: it counts nothing (the state is returned
// unchanged) and fits while the state stands at or below the limit — at
// the limit exactly too, with Remaining 0, as envoyproxy/ratelimit answers
// a hits_addend of 0 — and not once a charge has left it past the limit.
//
// Granted is n, the units counted (up to the bounds above). Charge is pure;
// the Redis store's charge script performs the same arithmetic, operation
// for operation.
func (r Rule) Charge(s State, now, n int64) (State, Outcome) {
	now = r.clock(s, now)
	v := r.view(s, now)
	room := v.headroom(r, now)
	if n > 0 {
		v.charge(r, n)
		s = v.state(r)
	}
	o := Outcome{
		Granted:   n,
		Remaining: v.available(r, now),
		ResetAt:   v.resetAt(r, now),
		WindowEnd: v.windowEnd(r),
		ExpireAt:  v.expireAt(r, now),
	}
	if room < n {
		o.Over = true
		o.Overrun = n - max(room, 0)
		o.RetryAfter = v.retryAt(r, now, 0) - now
	}
	return s, o
}

// charge counts n units into the view, past the limit if need be, within
// the bounds of a debt (maxCount, maxDebtUS). Up to what is available it
// is take, exactly.
func (v *view) charge(r Rule, n int64) {
	switch r.Algorithm {
	case FixedWindow, Quota, SlidingWindow:
		v.cur = min(v.cur+n, maxCount)
	case GCRA:
		d := math.Ceil(float64(n) * float64(r.periodUS()) / float64(r.Limit))
		if d > float64(maxDebtUS) {
			d = float64(maxDebtUS)
		}
		v.tat += int64(d)
		if v.tat > v.at+maxDebtUS {
			v.tat = v.at + maxDebtUS
		}
	case TokenBucket:
		v.refillTo(r)
		v.tokens = v.tokens - float64(n)
		if lo := r.minTokens(); v.tokens < lo {
			v.tokens = lo
		}
	}
}

// minTokens is the fewest tokens a token bucket holds: maxDebtUS of refill
// below empty. A debt stored under another rate is read as at most this
// rule's (view), so its fill time stays within maxDebtUS plus the rule's
// own.
func (r Rule) minTokens() float64 {
	return float64(r.Capacity()) - float64(r.Limit)*float64(maxDebtUS)/float64(r.periodUS())
}

// ChargeDecision converts a Charge outcome to a Decision for rule: allowed
// unless the charge did not fit; WindowEnd names the window its units were
// counted in (when it counted any), fit or not.
func (o Outcome) ChargeDecision(rule Rule) Decision {
	d := Decision{
		Allowed:    !o.Over,
		Limit:      rule.Limit,
		Remaining:  o.Remaining,
		ResetAt:    time.UnixMicro(o.ResetAt),
		RetryAfter: time.Duration(o.RetryAfter) * time.Microsecond,
		Overrun:    o.Overrun,
	}
	if o.Granted > 0 && o.WindowEnd != 0 {
		d.WindowEnd = time.UnixMicro(o.WindowEnd)
	}
	return d
}

// CheckCharge validates the arguments of Charge; stores call it first. A
// charge is 0 (check only) to MaxLimit units.
func CheckCharge(rule Rule, n int64) error {
	if err := rule.Validate(); err != nil {
		return err
	}
	if n < 0 || n > MaxLimit {
		return fmt.Errorf("%w (charging %d; a charge is 0 to 2^40)", ErrInvalidCost, n)
	}
	return nil
}

// Charge asks the machine for a charge of n ≥ 0 units at now
// (Limiter.Charge) and returns what the driver must do; a served or denied
// charge's decision is written to d. Step.Credits is, for MustLease,
// MustWait and MustCharge, the units of the charge still to count: the
// driver passes them as n when it asks again.
//
// A charge is never refused. n > 0 takes what it can from the key's
// credits (units the store counted when it leased them) and is served
// once they cover it, leasing more as a check does (at least what is still
// to count, at most a batch); what the store cannot grant — a remembered
// denial covers it — the driver has the store count in full, past the
// limit (MustCharge), and lands the answer with Charged. A check-only
// charge (n = 0) is served while the key holds credits (counted units not
// yet used: the store stands at or below the limit), leases a batch when
// it holds none, denies while an overrun the key learned of lasts, and
// asks the store without counting (MustCharge of 0) once a lease of one
// unit is denied: the store then stands at the limit or past it.
func (m *Machine) Charge(k *KeyState, now time.Time, n int64, d *Decision) (st Step) {
	k.LastUsed = now
	if !k.Until.IsZero() && (!now.Before(k.Until) || k.Credits > 0 && m.decays()) {
		st.Stranded = m.Expire(k, now)
	}
	if m.NewSizer != nil {
		m.track(k, now)
	}
	take := min(k.Credits, n)
	k.Credits -= take
	k.Served += take
	k.Used += take
	rest := n - take
	if rest == 0 && (n > 0 || k.Credits > 0) {
		*d = Decision{Allowed: true, Limit: m.Rule.Limit, Remaining: m.remaining(k, now), ResetAt: k.Reset, WindowEnd: k.WindowEnd}
		if now.After(k.Reset) && m.Rule.Windowed() {
			_, we := m.Rule.WindowBounds(now.UnixMicro())
			d.ResetAt = time.UnixMicro(we)
		}
		st.Kind = Served
		return st
	}
	st.Credits = rest
	if dd, ok := k.over(now); ok && n == 0 {
		*d = dd
		st.Kind = Denied
		return st
	}
	need := max(rest, 1)
	if _, ok := k.denied(need, now); ok {
		st.Kind = MustCharge
		return st
	}
	if k.Lease != 0 && m.Fault&FaultTwoLeases == 0 {
		st.Kind, st.Lease = MustWait, k.Lease
		return st
	}
	st.Kind, st.Min, st.Max = MustLease, need, max(m.batch(k), need)
	st.Lease = m.begin(k, need)
	return st
}

// Charged lands the store's answer d to a charge the machine asked for at
// now (MustCharge): an overrun — the store stands past the limit — is
// remembered until d's RetryAfter, and denies every check and check-only
// charge of the key until then (charges are still counted).
func (m *Machine) Charged(k *KeyState, now time.Time, d Decision) {
	switch {
	case d.Fallback:
	case d.Allowed:
		k.Remote = d.Remaining
		if !m.Rule.Windowed() || !d.WindowEnd.Equal(k.WindowEnd) {
			k.Showing = false
		}
	case d.RetryAfter > 0:
		deny := d
		deny.Overrun, deny.WindowEnd = 0, time.Time{}
		k.DenyUntil, k.DenyNeed, k.Deny = now.Add(d.RetryAfter), 0, deny
	}
}

// over answers from a remembered overrun (DenyNeed 0), if one lasts at now.
func (k *KeyState) over(now time.Time) (Decision, bool) {
	if k.DenyNeed != 0 || !now.Before(k.DenyUntil) {
		return Decision{}, false
	}
	d := k.Deny
	d.RetryAfter = k.DenyUntil.Sub(now)
	return d, true
}
