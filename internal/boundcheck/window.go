package boundcheck

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// window is what one window of a windowed counter was told, in the
// store's epoch in place (a restart starts a new one).
type window struct {
	count     int64 // counted in this epoch: admitted + extras − refunds
	over      int64 // units admitted past the limit
	first     int   // the step of the first such admission
	overRow   string
	refunded  bool  // a refund went back into it (cached_deny's denials then stand on less)
	restarted bool  // the store restarted in it
	killed    bool  // a node was killed or stopped in it
	moved     bool  // a reload renamed, reordered, moved or re-counted the limit in it
	leased    bool  // a leased or fair policy was in force in it
	unseen    int64 // admitted in it from credits kept across a restart: what the new store never counted
	asked     int64
	admitted  int64
	most      int64 // the largest limit in force in it
}

// judgeWindows judges a fixed or sliding window counter. Each admission
// must fit what its window counted as the clients were told it (a sliding
// window adds the last window's count, weighted by how much of it the
// last period still overlaps): what does not is over the limit, and a
// window's over may be at most what the nodes hold. Strict and
// cached_deny rules' admissions each reach the store, so the judge
// follows the store's windows: a stamp older than the newest window the
// store counted in is counted in that one. Leased and fair rules' under
// skewed clocks are judged by suffix (suffix). A steady schedule's
// windows are judged for what they admitted.
func judgeWindows(sc Schedule, h *history, due map[int]*dueness) []Violation {
	p := int64(h.key.Period / time.Microsecond)
	sliding := h.key.Algorithm == SlidingWindow
	everLeased := slices.ContainsFunc(h.events, func(ev event) bool {
		return ev.spec.Fair || (ev.spec.Mode == Leased && ev.limit.Count > 0)
	})
	bySuffix := sc.Skew != nil && everLeased
	wins := map[int64]*window{}
	get := func(w int64) *window {
		x := wins[w]
		if x == nil {
			x = &window{}
			wins[w] = x
		}
		return x
	}
	var (
		out         []Violation
		limit       Limit
		newest      int64 // the newest window the store counted in (strict, cached_deny)
		hasNewest   bool
		leasedSoFar bool
		restarted   bool
		resWin      = map[int]int64{} // a reservation's step: the window that counted it
	)
	// The epoch's windows are judged when the store restarts, and at the end.
	judge := func() {
		for _, w := range slices.Sorted(maps.Keys(wins)) {
			x := wins[w]
			held := int64(0)
			if x.leased {
				held = heldBy(sc, true)
			}
			if x.over > held && !bySuffix {
				out = append(out, Violation{Row: Rows[x.overRow].Name, Step: x.first, Safety: true,
					Detail: fmt.Sprintf("%v window %d: %d units admitted past the limit (from step #%d), want at most %d; the window counted %d",
						h.key, w, x.over, x.first, held, x.count)})
			}
			x.count, x.over = 0, 0
		}
	}
	// at is the instant the store reads ev at, and its window.
	at := func(ev event) (int64, int64) {
		t := ev.at
		w := floorDiv(t, p)
		if ev.spec.Mode != Leased && !ev.spec.Fair && hasNewest && w < newest {
			t, w = newest*p, newest
		}
		return t, w
	}
	// wrote notes that the store counted in window w.
	wrote := func(w int64) {
		if !hasNewest || w > newest {
			newest, hasNewest = w, true
		}
	}
	// past is how many of units more window w at t counts past its
	// limit (0: they fit).
	past := func(w, t, units int64) int64 {
		need := (get(w).count + units) * p
		if sliding {
			if prev := wins[w-1]; prev != nil {
				need += max(0, prev.count-prev.unseen) * (p - (t - w*p))
			}
		}
		return min(units, max(0, (need-limit.Count*p+p-1)/p))
	}
	for _, ev := range h.events {
		if ev.kind != evRefund { // a refund carries its reservation's figures
			limit = ev.limit
		}
		mode := ev.spec.Mode
		leasedNow := ev.spec.Fair || (mode == Leased && limit.Count > 0)
		leasedSoFar = leasedSoFar || leasedNow
		t, w := at(ev)
		x := get(w)
		x.leased = x.leased || leasedNow
		x.most = max(x.most, limit.Count)
		switch ev.kind {
		case evReload:
			x.moved = x.moved || ev.moved
		case evKill:
			x.killed = true
		case evRestart:
			judge()
			x.restarted, restarted, hasNewest = true, true, false
			if x.leased {
				// The nodes keep their credits across it, and admit from
				// them what the new store never counts: a sliding window
				// weighs a count the store does not know in the next one.
				x.unseen = heldBy(sc, true)
			}
		case evTake:
			x.asked += ev.units
			x.admitted += ev.units
			if n := past(w, t, ev.units); n > 0 {
				if x.over == 0 {
					x.first = ev.step
					x.overRow = rowOf(sc, h, ev, x)
				}
				x.over += n
			}
			x.count += ev.units
			resWin[ev.step] = w
			wrote(w)
		case evExtra:
			x.count += ev.units
			wrote(w)
		case evRefund:
			if r, ok := resWin[ev.res]; ok && r == w {
				x.count = max(0, x.count-ev.units)
				x.refunded = true
			}
		case evDeny:
			x.asked += ev.units
			if ev.spec.Fair {
				continue
			}
			// A remembered denial lasts until its retry-after on the node's
			// clock: after a refund into the counts it stood on (a sliding
			// window's retry-after can reach into the next window), or
			// under skew (the store may have moved to a newer window on
			// another node's clock), it may outlive its cause.
			stale := x.refunded || sc.Skew != nil
			if prev := wins[w-1]; sliding && prev != nil {
				stale = stale || prev.refunded
			}
			can := mode != Leased && !leasedSoFar && !restarted && !(mode == CachedDeny && stale)
			row := modeRow(*ev.spec, false)
			if len(ev.spec.Limits) > 1 {
				row = rowSeveral
			} else if sc.Skew != nil {
				row = rowSkew
			}
			dueOf(due, ev.step, row).note(can, past(w, t, ev.units) > 0,
				fmt.Sprintf("%v window %d counted %d of %d", h.key, w, x.count, limit.Count))
		}
	}
	judge()
	if bySuffix {
		out = append(out, suffix(sc, h, p)...)
	}
	return append(out, steady(sc, h, wins)...)
}

// rowOf is the key of the row an admission ev past the limit in window x
// is judged by: the first of what bent the bound in its window, else its
// mode's.
func rowOf(sc Schedule, h *history, ev event, x *window) string {
	switch {
	case x.restarted:
		return rowRestart
	case sc.Skew != nil:
		return rowSkew
	case x.killed:
		return rowKill
	case x.moved:
		return rowReload
	case len(ev.spec.Limits) > 1:
		return rowSeveral
	}
	return modeRow(*ev.spec, h.key.bucket())
}

// suffix judges a leased or fair counter under skewed clocks, where a
// node's window is not the store's. Credits die when their window ends
// on the node's clock, so what a node admits stamped in window W or later
// came from the store's windows W and later, which grant at most their
// limits (a restart lets the store grant a window's again): everything
// admitted stamped from W on, less the refunds that went back into their
// window, is bounded by those limits. Extras are left out: they take from
// what a window can grant, never add to it.
func suffix(sc Schedule, h *history, p int64) []Violation {
	var most, restarts int64
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	for _, ev := range h.events {
		most = max(most, ev.limit.Count)
		w := floorDiv(ev.at, p)
		first, last = min(first, w), max(last, w)
		if ev.kind == evRestart {
			restarts++
		}
	}
	for from := first; from <= last; from++ {
		budget := (last - from + 1 + restarts) * most
		var count int64
		resWin := map[int]int64{}
		for _, ev := range h.events {
			w := floorDiv(ev.at, p)
			if w < from {
				continue
			}
			switch ev.kind {
			case evTake:
				count += ev.units
				resWin[ev.step] = w
				if count > budget {
					return []Violation{{Row: Rows[rowSkew].Name, Step: ev.step, Safety: true,
						Detail: fmt.Sprintf("%v: %d units admitted stamped in windows %d–%d (less refunds), past their limits' %d", h.key, count, from, last, budget)}}
				}
			case evRefund:
				if r, ok := resWin[ev.res]; ok && r == w {
					count = max(0, count-ev.units)
				}
			}
		}
	}
	return nil
}

// steady judges a steady schedule's windows (one fixed window, no reload,
// no skew): from the second on, each admits min(asked, limit) less what
// the nodes that lived in it may strand.
func steady(sc Schedule, h *history, wins map[int64]*window) []Violation {
	if !sc.Steady || len(sc.Spec.Limits) != 1 || h.key.Algorithm != FixedWindow || sc.Skew != nil {
		return nil
	}
	kills := map[int64]int{}
	for _, st := range sc.Steps {
		if st.Kind == Kill || st.Kind == Stop {
			kills[int64(st.At/h.key.Period)]++
		}
	}
	var out []Violation
	for _, w := range slices.Sorted(maps.Keys(wins)) {
		x := wins[w]
		if w == 0 || x.asked == 0 {
			continue
		}
		row := rowFair
		if !sc.Spec.Fair {
			row = modeRow(sc.Spec, false)
		}
		if kills[w] > 0 {
			row = rowKill
		}
		least := min(x.asked, x.most) - slackBy(sc.Spec, sc.Nodes+kills[w])
		if x.admitted < least {
			out = append(out, Violation{Row: Rows[row].Name, Window: int(w), Step: -1,
				Detail: fmt.Sprintf("%v window %d admitted %d of %d asked, want at least %d = %s", h.key, w, x.admitted, x.asked, least, Rows[row].Least)})
		}
	}
	return out
}
