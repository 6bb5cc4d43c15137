package gale

import "time"

// Machine is the leasing protocol of one rule, for one key at a time: the
// transitions of a KeyState. It is pure — no locks, no goroutines, no clock,
// no I/O — and allocates nothing on the served path: every instant is an
// argument, and what must happen outside (a lease to ask the store for,
// credits to give back) is returned as a value for the driver to carry out.
// The Limiter is one driver (shards, locks, store calls, background
// refills); pkg/gale/model is another, which enumerates the interleavings of
// these transitions for N nodes against an abstract store.
//
// Instants are the caller's clock, the one the store's windows are on
// (requests are stamped once and passed down), in whole microseconds.
type Machine struct {
	// Rule is the rule the key is limited by.
	Rule Rule
	// Batch is the size of a lease when the key has no sizer. ≥ 1.
	Batch int64
	// Uncoupled lets credits outlive the store window that granted them
	// (LeaseConfig.Uncoupled).
	Uncoupled bool
	// LowWater starts a background lease once a key's credits fall to it
	// (LeaseConfig.LowWater); 0 for none.
	LowWater int64
	// NewSizer gives each key its batch sizer (LeaseConfig.NewSizer); nil
	// for the fixed Batch.
	NewSizer func() BatchSizer
	// ReturnIdleAfter is how long a key may go without a check before its
	// credits go back to the store (LeaseConfig.ReturnIdleAfter); 0 for
	// never.
	ReturnIdleAfter time.Duration
	// Fault is a deliberate defect, for the model's mutation checks only:
	// the zero value in every real limiter.
	Fault Fault
}

// Fault names a deliberate defect of a Machine. The model must find each.
type Fault uint8

const (
	// FaultCarryCoupledCredits keeps window-coupled credits past the end of
	// the window that granted them.
	FaultCarryCoupledCredits Fault = 1 << iota
	// FaultTwoLeases lets a check start a lease while one is in flight for
	// its key.
	FaultTwoLeases
	// FaultUncheckedGiveBack puts a given-back unit into whatever credits
	// the key holds (while they live), whatever window granted it and
	// whether or not the key served it: the refund and negative-hit holes.
	FaultUncheckedGiveBack
	// FaultFullBatchRefill has a low-water refill ask a whole batch even
	// where credits carry over: the low-water hole.
	FaultFullBatchRefill
	// FaultUndecayedCredits keeps window-coupled credits of a rule without
	// windows whole until they are used (decay.go): the leased GCRA hole.
	FaultUndecayedCredits
	// FaultDecayedGiveBack gives decaying credits back to the store on a
	// drain (decay.go says why they must not go).
	FaultDecayedGiveBack
)

// KeyState is all leasing state of one key on one node. The zero value is a
// key that holds nothing.
type KeyState struct {
	// Credits are leased units not yet served. Invariant: Credits ≥ 0.
	Credits int64
	// Expires is the instant the credits die (window coupling); the zero
	// time when they never do. Invariant: Expires is zero or equals Until.
	Expires time.Time
	// WindowEnd is the store window (store clock) the newest credits came
	// from, and FromWindow how many credits came from it: what may be
	// returned there. Until is that window's end on the caller's clock (zero
	// for the strategies without windows). Invariant: 0 ≤ FromWindow, and
	// a return gives back at most min(Credits, FromWindow).
	WindowEnd  time.Time
	FromWindow int64
	Until      time.Time
	// Used is how many units the key served from WindowEnd's credits while
	// that window was in place, less what give-backs restored: the most a
	// give-back may restore. Invariant: Used ≥ 0, and Used = 0 once Until
	// has passed.
	Used int64
	// Remote and Reset are the store's Remaining and ResetAt (on the
	// caller's clock) at the last lease, for the decisions served locally.
	Remote int64
	Reset  time.Time
	// Shown is the Remaining the key last reported, when Showing: of the
	// store window WindowEnd (a windowed rule), or since the last store
	// answer (a rule without windows, whose store refills with time). A
	// served check reports at most Shown, so that the figure never rises
	// between two answers of one process in a window (remaining).
	Shown   int64
	Showing bool
	// Lease names the lease in flight, 0 when none; LeaseMin is what it
	// must grant at least (the need of the check that began it), and
	// Abandoned is set when that check gave up before it landed.
	// Invariant: at most one lease per key is in flight (Lease is one
	// number), and a key with a lease in flight is never drained.
	Lease     uint64
	LeaseMin  int64
	Abandoned bool
	// Leases counts the leases begun, naming each.
	Leases uint64
	// Span is, for decaying credits (decay.go), the store's ResetAt (Unix
	// µs, the store's clock) of the grant the credits came from: where
	// their span of the store's bucket ends. 0 for none.
	Span int64
	// A denial remembered until DenyUntil: any check needing at least
	// DenyNeed units from the store is denied with Deny, locally.
	DenyUntil time.Time
	DenyNeed  int64
	Deny      Decision
	// LastUsed is the instant of the key's last check (idle return).
	LastUsed time.Time
	// With a sizer: the key's sizer, the window (its start, Unix µs) whose
	// demand Served is counting, and that demand.
	Sizer  BatchSizer
	Window int64
	Served int64
}

// StepKind is what a Check asks of its driver.
type StepKind uint8

const (
	// Served: the check is admitted from the credits. With Step.Refill the
	// driver also starts lease Step.Lease of [Step.Min, Step.Max] in the
	// background.
	Served StepKind = iota + 1
	// Denied: a remembered denial answers.
	Denied
	// MustLease: the driver asks the store for lease Step.Lease of
	// [Step.Min, Step.Max], lands it (Landed or Failed), and checks again.
	MustLease
	// MustWait: lease Step.Lease, begun by another check, is in flight; the
	// driver waits for it to land and checks again.
	MustWait
	// MustReturn: the driver gives Step.Credits back to the store (the
	// window of KeyState.WindowEnd) and checks again. The credits left the
	// key already.
	MustReturn
	// MustCharge (Charge only): the driver has the store count Step.Credits
	// units in full (Store.Charge; 0 asks without counting), lands the
	// answer with Charged, and answers with it.
	MustCharge
)

// Step is what one Check asks of its driver.
type Step struct {
	Kind StepKind
	// Refill (Served): also begin lease Lease in the background.
	Refill bool
	// Lease names the lease to begin (MustLease, Served with Refill) or to
	// wait for (MustWait); Min and Max bound its grant.
	Lease    uint64
	Min, Max int64
	// Credits (MustReturn) left the key for the store window of the key's
	// WindowEnd, as of the check's instant; of a Charge's step, they are
	// the units of the charge still to count.
	Credits int64
	// Stranded is how many credits expired unused during the step.
	Stranded int64
}

// Return is credits to give back to the store window ending at WindowEnd,
// as of At.
type Return struct {
	Credits   int64
	WindowEnd time.Time
	At        time.Time
}

// carries reports whether credits outlive the store window that granted
// them: uncoupled, or a strategy without windows.
func (m *Machine) carries() bool { return m.Uncoupled || !m.Rule.Windowed() }

// Check asks whether cost units may be served at now, and returns what the
// driver must do; a served or denied check's decision is written to d
// (field by field: an out-parameter costs the served path no copy).
//
// The driver's loop ends because each pass either serves, denies, leases
// (which lands credits or a remembered denial), waits for a lease that does,
// or gives back credits that cannot serve the check (the key then holds
// none).
func (m *Machine) Check(k *KeyState, now time.Time, cost int64, d *Decision) (st Step) {
	k.LastUsed = now
	if !k.Until.IsZero() && (!now.Before(k.Until) || k.Credits > 0 && m.decays()) {
		st.Stranded = m.Expire(k, now)
	}
	if m.NewSizer != nil {
		m.track(k, now)
	}
	if k.Credits >= cost {
		k.Credits -= cost
		k.Served += cost
		k.Used += cost
		d.Allowed, d.Limit, d.Remaining = true, m.Rule.Limit, m.remaining(k, now)
		d.ResetAt, d.WindowEnd, d.RetryAfter, d.Fallback = k.Reset, k.WindowEnd, 0, false
		if now.After(k.Reset) && m.Rule.Windowed() {
			// Uncoupled credits outlive their window: the window in place
			// is the one to report.
			_, we := m.Rule.WindowBounds(now.UnixMicro())
			d.ResetAt = time.UnixMicro(we)
		}
		st.Kind = Served
		if m.LowWater > 0 && k.Credits <= m.LowWater && k.Lease == 0 && !now.Before(k.DenyUntil) {
			// A refill where credits carry over asks only what tops the key
			// up to a batch: a node never holds more than a batch, and a
			// fleet carries at most N·Batch into a window.
			want := m.batch(k)
			if m.carries() && m.Fault&FaultFullBatchRefill == 0 {
				want -= k.Credits
			}
			if want >= 1 {
				st.Refill, st.Lease, st.Min, st.Max = true, m.begin(k, 1), 1, want
			}
		}
		return st
	}
	need := cost - k.Credits
	if dd, ok := k.denied(need, now); ok {
		if k.Credits > 0 && m.decays() {
			// Decaying credits (decay.go) are fewer by the retry, and
			// cannot go back to the store: strand them, and ask again for
			// the whole cost, so that the RetryAfter answered is when this
			// check fits.
			st.Stranded += m.drop(k, k.Credits)
			k.DenyUntil = time.Time{}
			st.Kind, st.Min, st.Max = MustLease, cost, max(m.batch(k), cost)
			st.Lease = m.begin(k, cost)
			return st
		}
		if k.Credits > 0 && !m.carries() && !k.DenyUntil.Before(k.Until) {
			// The store can give the rest of the need only once the window
			// of these credits has ended, and they die with it: a retry at
			// the denial's RetryAfter would find them gone and need the
			// whole cost. Give them back, as an idle return would, and ask
			// again for the whole cost, so that the RetryAfter answered is
			// when this check fits.
			n := min(k.Credits, k.FromWindow)
			k.Credits -= n
			k.FromWindow -= n
			k.DenyUntil = time.Time{}
			st.Kind, st.Credits = MustReturn, n
			return st
		}
		*d = dd
		st.Kind = Denied
		return st
	}
	if k.Lease != 0 && m.Fault&FaultTwoLeases == 0 {
		st.Kind, st.Lease = MustWait, k.Lease
		return st
	}
	st.Kind, st.Min, st.Max = MustLease, need, max(m.batch(k), cost)
	st.Lease = m.begin(k, need)
	return st
}

// begin records a lease in flight that must grant at least min, and names it.
func (m *Machine) begin(k *KeyState, min int64) uint64 {
	k.Leases++
	if k.Lease != 0 {
		// Only under FaultTwoLeases: a second lease, which the key does not
		// record (the first keeps the one slot).
		return k.Leases
	}
	k.Lease, k.LeaseMin, k.Abandoned = k.Leases, min, false
	return k.Lease
}

// Landed lands lease id's grant g, asked at sent (the caller's clock when
// the request left; the store's instants are converted by their distance
// from g.Now). It returns the credits stranded. A grant of nothing is a
// denial, remembered until its RetryAfter for checks needing as much.
func (m *Machine) Landed(k *KeyState, id uint64, sent time.Time, g Grant) (stranded int64) {
	if k.Lease == id {
		k.Lease = 0
	}
	local := func(t time.Time) time.Time { return sent.Add(t.Sub(g.Now)) }
	if g.Granted == 0 {
		k.DenyUntil, k.DenyNeed, k.Deny = sent.Add(g.Decision.RetryAfter), k.LeaseMin, g.Decision
		k.Abandoned = false
		return 0
	}
	k.DenyUntil = time.Time{}
	if !m.Rule.Windowed() || !g.WindowEnd.Equal(k.WindowEnd) {
		k.Showing = false // a new window, or a bucket's new answer: see remaining
	}
	stranded = m.Expire(k, sent)
	if m.decays() && m.Fault&FaultUndecayedCredits == 0 {
		stranded += m.joinSpan(k, g)
	}
	if !g.WindowEnd.Equal(k.WindowEnd) {
		if !m.Uncoupled && k.Credits > 0 {
			// Credits of an older window must not ride on the new window's
			// expiry.
			stranded += k.Credits
			k.Credits = 0
		}
		k.WindowEnd, k.FromWindow, k.Used = g.WindowEnd, 0, 0
	}
	k.Credits += g.Granted
	k.FromWindow += g.Granted
	if k.Abandoned {
		stranded += m.drop(k, k.LeaseMin)
		k.Abandoned = false
	}
	switch {
	case !g.WindowEnd.IsZero():
		k.Until = local(g.WindowEnd)
		if !m.Uncoupled {
			k.Expires = k.Until
		}
	case m.decays():
		// The store's bucket holds this grant until its reset (decay.go).
		k.Until = local(g.Decision.ResetAt)
		k.Expires = k.Until
	}
	k.Remote, k.Reset = g.Decision.Remaining, local(g.Decision.ResetAt)
	return stranded
}

// remaining is what a check served from k's credits at now reports: what
// the fleet had left at the key's last store answer (the store's Remaining
// then, plus the credits this node held) less what the node served since —
// its credits now plus that Remaining — at most the capacity, and at most
// what the key last reported in the same window (Shown). The figure
// ignores what other nodes took since that answer: it is this node's
// view, true as of its last answer, and it never rises between two
// answers in one window, though a refund, another node's give-back or a
// lease finding the store refilled would raise it. For a rule without
// windows the store's bucket refills with time, and the figure restarts at
// each store answer: it is monotonic between two answers.
func (m *Machine) remaining(k *KeyState, now time.Time) int64 {
	// Credits carried from an earlier lease and the store's count at the
	// last lease may add up to more than the rule ever admits at once
	// (a low-water refill landing on a store that has refilled
	// meanwhile): report at most the capacity.
	r := min(k.Credits+k.Remote, m.Rule.Capacity())
	if m.Rule.Windowed() && !k.Until.IsZero() && !now.Before(k.Until) {
		// Uncoupled credits past their window: the store's figure is of an
		// older window, and there is none of this one to hold to.
		k.Showing = false
		return r
	}
	if k.Showing {
		r = min(r, k.Shown)
	}
	k.Shown, k.Showing = r, true
	return r
}

// Failed ends lease id, which the store did not answer.
func (m *Machine) Failed(k *KeyState, id uint64) {
	if k.Lease == id {
		k.Lease, k.Abandoned = 0, false
	}
}

// Abandon records that the check which began lease id, needing need, gave
// up waiting for it; granted says whether the lease has landed with credits
// (when it is no longer in flight). Uncoupled, the credits that check
// needed must not carry on to other checks, which may be stamped in a later
// window: they are dropped now if the lease has landed, when it lands
// otherwise. It returns the credits stranded.
func (m *Machine) Abandon(k *KeyState, id uint64, need int64, granted bool) (stranded int64) {
	if !m.Uncoupled {
		return 0
	}
	if k.Lease == id {
		k.Abandoned = true
		return 0
	}
	if granted {
		return m.drop(k, need)
	}
	return 0
}

// drop strands up to n of k's credits.
func (m *Machine) drop(k *KeyState, n int64) int64 {
	n = min(n, k.Credits)
	k.Credits -= n
	k.FromWindow = max(k.FromWindow-n, 0)
	return n
}

// Expire ends what belongs to a store window that has ended at now: the
// count of units served from it and, window-coupled, its credits, which it
// returns as stranded.
func (m *Machine) Expire(k *KeyState, now time.Time) (stranded int64) {
	if k.Until.IsZero() {
		return 0
	}
	if now.Before(k.Until) {
		if m.decays() && k.Credits > 0 {
			return m.decay(k, now)
		}
		return 0
	}
	k.Used = 0
	if k.Credits > 0 && !k.Expires.IsZero() && m.Fault&FaultCarryCoupledCredits == 0 {
		stranded = k.Credits
		k.Credits, k.FromWindow = 0, 0
	}
	return stranded
}

// Idle reports whether k has had no check for ReturnIdleAfter at now: the
// driver then drains it.
func (m *Machine) Idle(k *KeyState, now time.Time) bool {
	return m.ReturnIdleAfter > 0 && !k.LastUsed.After(now.Add(-m.ReturnIdleAfter))
}

// Drain takes the credits of a key leaving L1 (idle return, eviction,
// reload, shutdown) at now: what may go back to the store, and the credits
// stranded. The key holds nothing after it.
func (m *Machine) Drain(k *KeyState, now time.Time) (r Return, stranded int64) {
	stranded = m.Expire(k, now)
	n := min(k.Credits, k.FromWindow)
	if m.decays() && m.Fault&(FaultUndecayedCredits|FaultDecayedGiveBack) == 0 {
		// Decaying credits cannot go back (decay.go): a give-back frees
		// the store's newest span, another node's.
		stranded += n
		n = 0
	}
	k.Credits, k.FromWindow, k.Used = 0, 0, 0
	if n <= 0 {
		return Return{}, stranded
	}
	return Return{Credits: n, WindowEnd: k.WindowEnd, At: now}, stranded
}

// GiveBack gives back up to n units the key served from the credits of the
// window in place at now — only when those credits are of window end, if
// onlyWindow — and never more than it served (Used). Window-coupled the units
// join the credits again (they expire with the window they came from);
// otherwise they go back to the store's count of that window, as r. It
// returns how many units were given back.
func (m *Machine) GiveBack(k *KeyState, now time.Time, n int64, onlyWindow bool, end time.Time) (given int64, r Return) {
	if m.Fault&FaultUncheckedGiveBack != 0 {
		if !k.Expires.IsZero() && !now.Before(k.Expires) {
			return 0, Return{}
		}
		k.Credits += n
		k.Used = max(k.Used-n, 0)
		return n, Return{}
	}
	if onlyWindow && !k.WindowEnd.Equal(end) {
		return 0, Return{} // its credits are of a later window: nothing of this one to give back to
	}
	m.Expire(k, now) // a window that has ended has Used = 0
	n = min(n, k.Used)
	if n <= 0 {
		return 0, Return{}
	}
	k.Used -= n
	if !m.carries() || m.decays() {
		k.Credits += n
		k.FromWindow += n
		return n, Return{}
	}
	return n, Return{Credits: n, WindowEnd: k.WindowEnd, At: now}
}

// Denied answers a check needing need store units at now from a remembered
// denial, if one covers it.
func (k *KeyState) denied(need int64, now time.Time) (Decision, bool) {
	if need < k.DenyNeed || !now.Before(k.DenyUntil) {
		return Decision{}, false
	}
	d := k.Deny
	d.RetryAfter = k.DenyUntil.Sub(now)
	return d, true
}

// CachedDenial answers a check of cost at now from a remembered denial
// (cached-deny mode).
func (k *KeyState) CachedDenial(now time.Time, cost int64) (Decision, bool) {
	d, ok := k.denied(cost, now)
	if ok {
		k.LastUsed = now
	}
	return d, ok
}

// RememberDenial remembers the store's denial d of cost at now until its
// RetryAfter (cached-deny mode).
func (k *KeyState) RememberDenial(now time.Time, cost int64, d Decision) {
	k.DenyUntil, k.DenyNeed, k.Deny, k.LastUsed = now.Add(d.RetryAfter), cost, d, now
}

// batch is the size of k's next lease.
func (m *Machine) batch(k *KeyState) int64 {
	if k.Sizer == nil {
		return m.Batch
	}
	return min(max(k.Sizer.Batch(), 1), MaxLimit)
}

// track feeds k's sizer the demand of each window that has ended: windows of
// the rule (a bucket's are its period) on the caller's clock.
func (m *Machine) track(k *KeyState, now time.Time) {
	if k.Sizer == nil {
		k.Sizer = m.NewSizer()
	}
	us := now.UnixMicro()
	w, _ := m.Rule.WindowBounds(us)
	if !m.Rule.Windowed() {
		p := int64(m.Rule.Period / time.Microsecond)
		w = floorDiv(us, p) * p
	}
	if w != k.Window {
		if k.Window != 0 {
			k.Sizer.Observe(float64(k.Served))
		}
		k.Window, k.Served = w, 0
	}
}
