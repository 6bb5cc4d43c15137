package gale

import (
	"math"
	"math/bits"
	"time"
)

// Leased credits of a rule without windows (GCRA, token bucket) cannot die
// at a boundary. Window-coupled (the default), they decay instead, as the
// store's bucket drains: a grant that left the store's bucket full until
// ResetAt (its theoretical arrival time, or when the token bucket is full
// again) stands for units the store has counted only until then, at the
// rule's rate. At now, a key may serve at most
//
//	live = ⌊(Until − now) · Limit / Period⌋
//
// of its credits, Until being that ResetAt on the caller's clock; the rest
// are stranded. The bound this gives, for any number of nodes: admissions
// in any interval [a, b] ≤ Capacity + rate·(b − a), as one bucket admits.
//
// Why: the store grants in [a, b] at most Capacity + rate·(b − a) less its
// debt at a, the units it counted that have not drained by a,
// rate·(TAT(a) − a). Each grant takes its own span of the store's arrival
// axis, (S, ResetAt], disjoint from every other grant's, and a key holds
// credits of one grant only (Landed strands older ones): so what a key may
// serve after a, min(credits, rate·(ResetAt − a)), is at most rate times
// its span's part after a, and the fleet's sum at most the debt. (A key's
// next grant joins its credits only where the two spans meet: joinSpan.) What nodes
// serve in [a, b] from earlier grants is therefore paid for by what the
// store can no longer grant. docs/PROOFS.md's rate model checks it.
//
// Decaying credits never go back to the store (a drain, or a check that
// needs more than it holds, strands them): the store's give-back moves its
// arrival time back, freeing the newest span — another node's, whose
// credits would then outlive the store's count (the rate model found it).
// A unit given back by a refund or a negative hit joins the key's credits
// instead, at most what the key served from its grant.

// decays reports whether k's credits decay as the store's bucket drains:
// leased, window-coupled, under a rule without windows.
func (m *Machine) decays() bool { return !m.Uncoupled && !m.Rule.Windowed() }

// live returns how many of k's credits may still be served at now.
func (m *Machine) live(k *KeyState, now time.Time) int64 {
	left := k.Until.Sub(now)
	if left <= 0 || m.Rule.Period <= 0 {
		return 0
	}
	// ⌊left·Limit/Period⌋, exact: the product (below 2^63·2^41) in 128
	// bits. Dividing left by a rounded-down per-unit period instead could
	// count one unit more than has not drained.
	hi, lo := bits.Mul64(uint64(left), uint64(m.Rule.Limit))
	if hi >= uint64(m.Rule.Period) {
		return k.Credits // the quotient is past 2^64: far above any capacity
	}
	q, _ := bits.Div64(hi, lo, uint64(m.Rule.Period))
	if q > uint64(k.Credits) {
		return k.Credits
	}
	return int64(q)
}

// decay strands the credits of k that no longer lie ahead of the store's
// drained point at now, and returns how many.
func (m *Machine) decay(k *KeyState, now time.Time) (stranded int64) {
	if m.Fault&FaultUndecayedCredits != 0 {
		return 0
	}
	if live := m.live(k, now); live < k.Credits {
		stranded = k.Credits - live
		k.Credits = live
		k.FromWindow = min(k.FromWindow, live)
	}
	return stranded
}

// joinSpan readies k for a grant g that is landing: the credits k holds
// go on beside g's only when their span of the store's bucket ends where
// g's begins (GCRA, whose spans are exact: the key's own grants with no
// other node's between), so that the key's credits still lie in one span;
// otherwise they are stranded, with what the key served from them, and
// returned. It records g's span.
func (m *Machine) joinSpan(k *KeyState, g Grant) (stranded int64) {
	if g.Granted <= 0 {
		return 0
	}
	end := g.Decision.ResetAt.UnixMicro()
	width := int64(math.Ceil(float64(g.Granted) * float64(m.Rule.periodUS()) / float64(m.Rule.Limit)))
	if k.Credits == 0 || m.Rule.Algorithm != GCRA || k.Span == 0 || end-width > k.Span {
		stranded = k.Credits
		k.Credits, k.FromWindow, k.Used = 0, 0, 0
	}
	k.Span = end
	return stranded
}
