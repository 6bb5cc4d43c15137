package boundcheck

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// judgeBucket judges a GCRA or token bucket counter: one bucket admits at
// most Burst + rate·(b − a) over any [a, b] (docs/engine.md, "Bounds").
// In integers, in µs (the strategies' clock; a schedule's instants are
// truncated to it as the engine's are), with C the units the counter was
// told it consumed (admitted, extras, less refunds) and R(t) the integral
// of its rate (Count units per Period P, as unit·µs over P):
//
//	(C(b) − C(a⁻))·P − (R(b) − R(a)) ≤ B·P
//
// for every a ≤ b, b an admission, B the largest burst in force over
// [a, b] (a GCRA level has more room under a larger burst at once, and a
// token bucket whose state lapsed reads full at the burst in force). It
// is checked in one pass, keeping for each stretch between two reloads
// the least C(a⁻)·P − R(a) of its instants seen so far. The figures a
// reload gives are read into a state as if in force since it was last
// written, and a state lapses when the figures it was written under would
// have refilled it: so between two writes a bucket refills at any of the
// rates in force between them, the fastest for this bound
// (effectiveRates). A restart starts a full bucket: intervals start
// after it.
//
// Leased nodes admit from credits the store's bucket granted before; they
// decay as it drains, which keeps the bound exact, until an extra charged
// into the bucket or a restart leaves the nodes holding credits the
// bucket no longer counts. From then on the extras are left out (they
// take from what the bucket grants, never add to it) and the admissions
// may pass the bound by what the nodes hold.
//
// A denial is due if some [a, t] leaves its cost no room, with the
// burst in force at t for GCRA and at a for the token bucket (whose
// tokens a larger burst does not raise), the slowest rate that may have
// refilled it, and that rate short by 1 µs per store operation since a:
// GCRA rounds each take up and each give down to the µs, and the token
// bucket's floats can land a hair below a whole unit.
func judgeBucket(sc Schedule, h *history, due map[int]*dueness) []Violation {
	p := int64(h.key.Period / time.Microsecond)
	gcra := h.key.Algorithm == GCRA
	fastest, slowest := effectiveRates(h)
	const inf = math.MaxInt64
	var (
		limit Limit
		seg   = -1 // the stretch between reloads the events are in
		// Per stretch: its burst·P, and the least C(a⁻)·P − R(a) of its
		// instants this epoch, with extras (minG) and without (minA).
		bursts, minG, minA    []int64
		c, a, r, rd, drift    int64       // consumed, admitted less refunds, ∫ rate (the fastest, the slowest), ∫ rounding
		last                  int64       // the instant r is at
		minGd                 int64 = inf // least C(a⁻)·P − Rslow(a) + drift(a) (+ B(a)·P, token bucket), all along
		leased, extra, refund bool
		restarted, killed     bool
		moved                 bool
		counted               = map[int]bool{} // reservations counted here
		held                  = heldBy(sc, true)
		out                   []Violation
	)
	for _, ev := range h.events {
		if ev.at > last { // a bucket's instants never go back: no skew
			r += fastest[max(seg, 0)] * (ev.at - last)
			rd += slowest[max(seg, 0)] * (ev.at - last)
			last = ev.at
		}
		if ev.kind != evRefund { // a refund carries its reservation's figures
			limit = ev.limit
		}
		b := limit.Capacity() * p
		if ev.kind == evReload {
			seg++
			bursts, minG, minA = append(bursts, b), append(minG, inf), append(minA, inf)
		}
		if ev.kind == evRestart {
			for k := range minG {
				minG[k], minA[k] = inf, inf // the bucket is full again: judged from here
			}
		}
		if limit.Count > 0 { // an interval starts where the counter is in force
			minG[seg], minA[seg] = min(minG[seg], c*p-r), min(minA[seg], a*p-r)
			gd := c*p - rd + drift
			if !gcra {
				gd += b
			}
			minGd = min(minGd, gd)
		}
		leased = leased || ev.spec.Mode == Leased && limit.Count > 0
		switch ev.kind {
		case evReload:
			moved = moved || ev.moved
			drift += limit.Count // GCRA converts a level to a new rate rounding up
		case evKill:
			killed = true
		case evRestart:
			restarted = true
		case evTake:
			// How far past the bound the interval ending here is, at most.
			past := func(f int64, mins []int64) int64 {
				excess, burst := int64(math.MinInt64), int64(0)
				for k := seg; k >= 0; k-- {
					burst = max(burst, bursts[k])
					if mins[k] != inf {
						excess = max(excess, f-mins[k]-burst)
					}
				}
				return excess
			}
			excess, allowed := past((c+ev.units)*p-r, minG), int64(0)
			if leased && (extra || restarted) {
				excess, allowed = past((a+ev.units)*p-r, minA), held*p
			}
			if excess > allowed && len(out) == 0 {
				row := rowOf(sc, h, ev, &window{restarted: restarted, killed: killed, moved: moved})
				out = append(out, Violation{Row: Rows[row].Name, Step: ev.step, Safety: true,
					Detail: fmt.Sprintf("%v (%v): %d units admitted at %v, %.3f units past one bucket over some [a, b], want at most %d (the credits nodes hold)",
						h.key, limit, ev.units, time.Duration(ev.at)*time.Microsecond, float64(excess)/float64(p), allowed/p)})
			}
			c, a = c+ev.units, a+ev.units
			counted[ev.step] = true
			drift += limit.Count
		case evExtra:
			c += ev.units
			extra = true
			drift += limit.Count
		case evRefund:
			if counted[ev.res] {
				c, a = c-ev.units, a-ev.units
				refund = true
				drift += limit.Count
			}
		case evDeny:
			mode := ev.spec.Mode
			can := !ev.spec.Fair && mode != Leased && !leased && !restarted && !(mode == CachedDeny && refund)
			f := (c+ev.units)*p - rd + drift
			room := int64(0)
			if gcra {
				room = b
			}
			row := modeRow(*ev.spec, true)
			if len(ev.spec.Limits) > 1 {
				row = rowSeveral
			}
			dueOf(due, ev.step, row).note(can, f-minGd > room,
				fmt.Sprintf("%v (%v) had room for %d at %v", h.key, limit, ev.units, time.Duration(ev.at)*time.Microsecond))
			drift += 2 * limit.Count // taken and given back if another limit denied it
		}
	}
	return out
}

// effectiveRates are the fastest and the slowest rate (Count) each stretch
// of h between two reloads may refill at, as the bucket reads it: a state
// is read as if the figures in force at the read had been in force since
// it was written, and it lapses (reads as a full bucket) at the instant
// the figures in force at the write would have refilled it. So between
// two writes (an admission, an extra, a refund) a bucket refills at one of
// the rates in force between them: a stretch counts the fastest and the
// slowest of those from the stretch of the write before it to that of the
// write after it.
func effectiveRates(h *history) (fastest, slowest []int64) {
	var rates []int64
	var writes []bool // a stretch holds a write
	for _, ev := range h.events {
		switch ev.kind {
		case evReload:
			rates = append(rates, ev.limit.Count)
			writes = append(writes, false)
		case evTake, evExtra, evRefund:
			writes[len(writes)-1] = true
		}
	}
	fastest, slowest = make([]int64, len(rates)), make([]int64, len(rates))
	for i := range rates {
		from, to := i, i
		for from > 0 && !writes[from-1] {
			from--
		}
		from = max(from-1, 0) // the stretch of the write before
		for to < len(rates)-1 && !writes[to+1] {
			to++
		}
		to = min(to+1, len(rates)-1) // the stretch of the write after
		fastest[i], slowest[i] = slices.Max(rates[from:to+1]), slices.Min(rates[from:to+1])
	}
	return fastest, slowest
}
