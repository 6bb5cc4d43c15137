package model

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// The model's time: window w of the rule is [base + w·period, base +
// (w+1)·period), and every step of window w happens at its middle instant.
var base = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

const period = time.Minute

// instant is when the steps of window w happen.
func instant(w int) time.Time { return base.Add(time.Duration(w)*period + period/2) }

// windowEnd is the end of window w, on the store's clock and the nodes'.
func windowEnd(w int) time.Time { return base.Add(time.Duration(w+1) * period) }

// machine is the real leasing machine the config explores.
func (c Config) machine() *gale.Machine {
	return &gale.Machine{
		Rule:      gale.Rule{Algorithm: gale.FixedWindow, Limit: int64(c.Limit), Period: period},
		Batch:     int64(c.Batch),
		Uncoupled: !c.Coupled,
		LowWater:  int64(c.LowWater),
		Fault:     c.fault,
	}
}

// lease is the abstract L2's answer to a lease of [lo, hi] in window t.Window
// (Store.Lease): as many as remain up to hi, none when fewer than lo remain.
// Its clock is the nodes': Now is the instant the lease was sent.
func (c Config) lease(t *State, lo, hi int64) gale.Grant {
	end, now := windowEnd(t.Window), instant(t.Window)
	if int64(t.L2) < lo {
		return gale.Grant{Now: now, Decision: gale.Decision{Limit: int64(c.Limit), ResetAt: end, RetryAfter: end.Sub(now)}}
	}
	g := min(hi, int64(t.L2))
	t.L2 -= int(g)
	return gale.Grant{Granted: g, WindowEnd: end, Now: now, Decision: gale.Decision{Allowed: true, Limit: int64(c.Limit), ResetAt: end}}
}

// giveBack is the abstract L2 taking r back (Store.Return): credits of the
// window in place raise what it can grant, never above Limit; those of a
// window that has ended are dropped. It returns the credits taken back.
func (c Config) giveBack(t *State, r gale.Return) int {
	if r.Credits <= 0 || !r.WindowEnd.Equal(windowEnd(t.Window)) {
		return 0
	}
	back := min(int(r.Credits), c.Limit-t.L2)
	t.L2 += back
	return int(r.Credits)
}

// Next returns every transition enabled in s: each node's in index order
// (in the order of the StepKind constants), then the roll. A check the
// machine denies is a Deny step: it changes nothing when L2 answered it
// before, and otherwise lands the denial the node remembers. s is not
// modified.
//
// Each case names the machine call it sequences, as gale.Limiter's
// checkLeased, Refund, GiveBack and ReturnIdle sequence them. Requests have
// cost 1.
func (c Config) Next(s State) []Transition {
	var out []Transition
	add := func(k StepKind, i, g int, t State) {
		out = append(out, Transition{Step{Kind: k, Node: i, Granted: g}, t})
	}
	m := c.machine()
	now, end := instant(s.Window), windowEnd(s.Window)
	for i, n := range s.Nodes {
		// A check: Check, and what it asks — a lease (landed at once, then
		// Check again), or a wait for the refill in flight (the check is
		// served after the Refill step: not a step of its own).
		for _, admit := range []bool{true, false} {
			if !admit && (c.Refunds == 0 || n.Held >= c.Refunds) {
				continue
			}
			t := s.clone()
			k := &t.Nodes[i].Key
			var d gale.Decision
			st := m.Check(k, now, 1, &d)
			granted := 0
			if st.Kind == gale.MustLease && c.GiveUps && admit && !c.DetachedLease {
				// The check gives up before its lease lands: the limiter
				// tells the machine, and the lease lands later (Refill).
				u := s.clone()
				uk := &u.Nodes[i].Key
				var ud gale.Decision
				ust := m.Check(uk, now, 1, &ud)
				m.Abandon(uk, ust.Lease, ust.Min, false)
				u.Nodes[i].Pending = int(ust.Max)
				add(GiveUp, i, 0, u)
				// Or it gives up as the lease lands: the machine hears of
				// it after the grant.
				u = s.clone()
				uk = &u.Nodes[i].Key
				ust = m.Check(uk, now, 1, &ud)
				g := c.lease(&u, ust.Min, ust.Max)
				m.Landed(uk, ust.Lease, now, g)
				m.Abandon(uk, ust.Lease, ust.Min, g.Granted > 0)
				if g.Granted > 0 {
					add(GiveUpLanded, i, int(g.Granted), u)
				}
			}
			if st.Kind == gale.MustLease {
				g := c.lease(&t, st.Min, st.Max)
				granted = int(g.Granted)
				m.Landed(k, st.Lease, now, g)
				if c.DetachedLease && g.Granted > 0 {
					// The check that asked is not served by this lease: it
					// lands alone, and a later check spends it.
					if admit {
						add(Lease, i, granted, t)
					}
					continue
				}
				st = m.Check(k, now, 1, &d)
			}
			switch st.Kind {
			case gale.Served:
				c.served(&t, i, st, d, admit)
				kind := Serve
				switch {
				case granted > 0 && admit:
					kind = LeaseServe
				case granted > 0:
					kind = LeaseTake
				case !admit:
					kind = Take
				}
				add(kind, i, granted, t)
			case gale.Denied:
				if admit {
					add(Deny, i, 0, t)
				}
			}
		}

		// runLease landing a lease in flight (a low-water refill, or the
		// lease of a check that gave up): L2 grants what remains up to what
		// it asked for; nothing (a remembered denial) when less than its
		// minimum remains.
		if n.Pending > 0 {
			t := s.clone()
			g := c.lease(&t, max(n.Key.LeaseMin, 1), int64(n.Pending))
			t.Nodes[i].Pending = 0
			m.Landed(&t.Nodes[i].Key, t.Nodes[i].Key.Lease, now, g)
			add(Refill, i, int(g.Granted), t)
		}

		// Limiter.Refund: the unit goes back to the window its decision
		// named, at most what the node served from it (GiveBack).
		if n.Held > 0 {
			t := s.clone()
			t.Nodes[i].Held--
			given, r := m.GiveBack(&t.Nodes[i].Key, now, 1, true, end)
			c.giveBack(&t, r)
			t.Consumed -= int(given)
			add(Refund, i, 0, t)
		}

		// Limiter.GiveBack (a negative hit), for the window in place; a hit
		// that gives nothing back changes nothing and is left out.
		if n.Negs < c.NegativeHits {
			t := s.clone()
			t.Nodes[i].Negs++
			if given, r := m.GiveBack(&t.Nodes[i].Key, now, 1, false, time.Time{}); given > 0 {
				c.giveBack(&t, r)
				t.Consumed -= int(given)
				t.Admitted -= int(given)
				add(Negative, i, 0, t)
			}
		}

		// ReturnIdle, an eviction, Close (Drain): the credits the machine
		// gives up go back to L2, which drops those of a window that has
		// ended, and the node forgets the key. A key with a lease in flight
		// is never drained. Federated, they go back by a reconcile in
		// flight (federated.go), which the network then delivers or loses.
		switch {
		case !c.Returns || n.Key.Lease != 0 || forgotten(n.Key):
		case c.federated():
			if tr, ok := c.send(s, i); ok {
				out = append(out, tr)
			}
		default:
			t := s.clone()
			r, _ := m.Drain(&t.Nodes[i].Key, now)
			back := c.giveBack(&t, r)
			t.Nodes[i] = Node{Held: n.Held, Negs: n.Negs} // Held and Negs belong to requests, not to the key
			add(Return, i, back, t)
		}
		if c.federated() {
			out = append(out, c.reconciles(s, i)...)
		}
	}
	// The roll: L2 starts the next window at Limit; each node's machine
	// expires what belonged to the window that ended (Expire, which every
	// machine call begins with: done here at once, so that equal states
	// look equal). Refunds of the ended window's units give nothing back.
	// The exploration stops at the last window.
	if s.Window+1 < c.Windows {
		t := s.clone()
		t.Window++
		t.L2 = c.Limit
		t.Admitted, t.Consumed = 0, 0
		next := instant(t.Window)
		for i := range t.Nodes {
			n := &t.Nodes[i]
			m.Expire(&n.Key, next)
			if c.federated() {
				c.rollReconciles(n)
			}
			n.Negs = 0
			if c.fault&gale.FaultUncheckedGiveBack == 0 {
				n.Held = 0
			}
		}
		add(Roll, 0, 0, t)
	}
	return out
}

// served accounts for a check the machine served on node i: admitted, or
// taken for a request another limit denies (held for its refund when the
// unit is of the window in place), and a refill the machine began.
func (c Config) served(t *State, i int, st gale.Step, d gale.Decision, admit bool) {
	n := &t.Nodes[i]
	if c.tracks() {
		t.Consumed++
	}
	switch {
	case admit:
		t.Admitted++
	case d.WindowEnd.Equal(windowEnd(t.Window)) || c.fault&gale.FaultUncheckedGiveBack != 0:
		n.Held++
	}
	if st.Refill {
		n.Pending = int(st.Max)
	}
}

// forgotten reports whether k is the state of a key the node does not hold.
func forgotten(k gale.KeyState) bool {
	return k.Credits == 0 && k.Lease == 0 && k.WindowEnd.IsZero() && k.DenyUntil.IsZero() && k.Used == 0
}

// nodeKey appends the encoding of n in window w: the fields of its state
// that can decide what a later step of c does, times as their place relative
// to the window (none, ended, this window's end).
//
// Left out: what only shapes a decision's wording (Remote, Reset, Deny), the
// driver's bookkeeping (LastUsed, the lease names, Served), and, when c has
// no give-back path, what only a give-back or a return reads (FromWindow,
// Used, the window the credits came from: after the roll's Expire a node's
// credits are of the window in place, or uncoupled and never expire).
// Without a low-water refill or a give-back, a remembered denial is left out
// too: L2 only falls within a window, so a node it denied would be denied
// again, and remembers it the same.
func (c Config) nodeKey(b []byte, n Node, w int) []byte {
	k := &n.Key
	end, now := windowEnd(w), instant(w)
	rel := func(t time.Time) byte {
		switch {
		case t.IsZero():
			return 0
		case t.Equal(end):
			return 2
		case t.Before(end):
			return 1
		}
		return 3
	}
	lease := byte(0)
	if k.Lease != 0 {
		lease = byte(k.LeaseMin)
		if k.Abandoned {
			lease |= 0x80
		}
	}
	b = append(b, byte(k.Credits), lease, byte(n.Pending), byte(n.Held), byte(n.Negs))
	if c.remembers() {
		deny := byte(0)
		if now.Before(k.DenyUntil) {
			deny = byte(k.DenyNeed)
		}
		b = append(b, deny)
	}
	if c.tracks() {
		// Only min(Credits, FromWindow) is ever read (a return gives back no
		// more), and every transition keeps it what it would be from the
		// full FromWindow; the full one grows with each take and refund.
		// Until and WindowEnd are read only against this window's end: none
		// and ended are alike (Expires is not: ended expiry has struck).
		// Used only a refund or a negative hit reads (GiveBack): the
		// federated spaces leave it out when they have neither. (The
		// other return spaces keep it, as their counts were pinned with
		// it.)
		cur := func(t time.Time) bool { return t.Equal(end) }
		used := byte(k.Used)
		if c.federated() && c.Refunds == 0 && c.NegativeHits == 0 {
			used = 0
		}
		b = append(b, byte(min(k.FromWindow, k.Credits)), used, rel(k.Expires), b2(cur(k.Until)), b2(cur(k.WindowEnd)))
	}
	if c.federated() {
		b = c.reconcileKey(b, n)
	}
	return b
}

func b2(x bool) byte {
	if x {
		return 1
	}
	return 0
}

// compare orders two nodes of s by their encoding in s's window.
func (c Config) compare(s State, a, b Node) int {
	return strings.Compare(string(c.nodeKey(nil, a, s.Window)), string(c.nodeKey(nil, b, s.Window)))
}

// sortNodes sorts s's nodes into the canonical order, in place.
func (c Config) sortNodes(s State) {
	slices.SortFunc(s.Nodes, func(a, b Node) int { return c.compare(s, a, b) })
}

// TraceStep is one step of a Trace and the (concrete, unsorted) state after it.
type TraceStep struct {
	Step  Step
	After State
}

// Trace is a path of transitions from Initial, with real node indices: a
// replay of it on N nodes is a valid run of the protocol.
type Trace struct {
	Initial State
	Steps   []TraceStep
}

// Last is the state the trace ends in.
func (t Trace) Last() State {
	if len(t.Steps) == 0 {
		return t.Initial
	}
	return t.Steps[len(t.Steps)-1].After
}

// String renders the trace one step a line, each with the state after it.
func (t Trace) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-36s %v\n", "initial", t.Initial)
	for _, s := range t.Steps {
		fmt.Fprintf(&b, "%-36s %v\n", s.Step, s.After)
	}
	return b.String()
}
