package rlqs

import (
	"math"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// next asks the bucket's lease if one is due at now, tells DENY_ALL to the
// streams that must deny, and sets the instant the driver must tick at.
func (m *Machine) next(b *Bucket, now time.Time, a *Actions) {
	if b.Lease == 0 && !now.Before(b.RefusedUntil) {
		if want, topUp := m.ask(b, now, b.Leases+1); want >= 1 {
			b.Leases++
			b.Lease, b.LeaseSent = b.Leases, now
			a.Lease = LeaseAsk{ID: b.Lease, Min: 1, Max: want, TopUp: topUp}
		}
	}
	wake := m.denyStarved(b, now, a)
	switch {
	case now.Before(b.RefusedUntil):
		a.Wake = b.RefusedUntil
	case now.Before(b.Until):
		a.Wake = b.Until
		if b.Lease == 0 {
			// A stream waiting for its older assignment to die may be
			// served once it has.
			for i := range b.Streams {
				st := &b.Streams[i]
				if now.Before(st.Live) && st.Live.Before(a.Wake) && !b.current(st, now) {
					a.Wake = st.Live
				}
			}
		}
	}
	if !wake.IsZero() && (a.Wake.IsZero() || wake.Before(a.Wake)) {
		a.Wake = wake
	}
}

// denyStarved sends a blanket DENY_ALL to each stream that must deny at
// now and has none in force to the end it must reach, and returns the
// next instant one may have to (zero: none). A stream must deny when it
// holds no assignment it may still spend — none in the window, or one
// within two Guards of its expiry — while the sidecar knows the store's
// window (denyEnd). The deny lasts a second past that window's end,
// rounded up to whole seconds, so that the next window's assignment,
// leased at the end, normally replaces it before it ends; one that has
// not by two Guards before the deny's end is covered by another.
//
// A stream that FailsClosed is never told: its Envoy denies without an
// assignment. Under Envoy's default no_assignment_behavior, ALLOW_ALL, an
// Envoy left without an action in force admits without limit: for a whole window
// when it got no share (2.0–3.1 L at 3L demand, issue 41), and for the
// second or so between its assignment's expiry (before the window ends,
// by Guard and the TTL's rounding) and the next window's assignment.
// Whatever replaces an action is sent two Guards before the action ends:
// one for its delivery, one for the tick that sends it running late, so
// that it reaches the Envoy before the action ends there (the
// pkg/gale/model RLQS model, delivery taking up to a Guard, finds a
// replacement one Guard ahead tying with the expiry). An Envoy loses what
// it had left of its share for at most two Guards.
func (m *Machine) denyStarved(b *Bucket, now time.Time, a *Actions) (wake time.Time) {
	end := m.denyEnd(b, now)
	if end.IsZero() {
		return time.Time{}
	}
	ahead, noSeal := 2*m.guard(), m.Fault&FaultNoSeal != 0
	ttl := (end.Sub(now) + time.Second - 1).Truncate(time.Second) + time.Second
	soonest := func(t time.Time) {
		if t.After(now) && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	for i := range b.Streams {
		st := &b.Streams[i]
		if st.FailsClosed {
			continue // its Envoy denies without an assignment
		}
		if seal := st.Expires.Add(-ahead); now.Before(seal) {
			if !noSeal {
				soonest(seal) // it spends its assignment until then
			}
			continue
		}
		if noSeal && now.Before(st.Expires) {
			continue
		}
		renew := st.Denied.Add(-ahead)
		switch {
		case !st.Denied.Before(end) && now.Before(renew):
			soonest(renew) // told already
			continue
		case b.Lease != 0 && st.Asked == b.Lease && now.Before(renew):
			soonest(renew) // its assignment is on its way
			continue
		case b.Lease != 0 && st.Denied.IsZero() && st.Expires.IsZero():
			continue // a subscriber: its first answer follows a lease's landing
		}
		st.Denied = now.Add(ttl)
		soonest(st.Denied.Add(-ahead))
		a.Assign = append(a.Assign, Assignment{Stream: st.ID, TTL: ttl, Deny: true, Seal: b.current(st, now)})
	}
	return wake
}

// denyEnd is the end of the store window a deny at now must last to: the
// window in place; the one the store said is spent; or, after a window
// the sidecar knew (one granted, or one refused), the next on its grid
// (Window apart) while the store answers. Zero when the sidecar knows
// none, or its last lease failed: the Envoys' own no_assignment_behavior
// decides (fail open under ALLOW_ALL, closed under DENY_ALL), as before
// any lease.
func (m *Machine) denyEnd(b *Bucket, now time.Time) time.Time {
	base := later(b.Until, b.Spent)
	switch {
	case b.inWindow(now):
		return b.Until
	case now.Before(b.Spent):
		return b.Spent
	case base.IsZero() || b.Failing || m.Window <= 0: // an unvalidated machine: no grid
		return time.Time{}
	}
	return base.Add((now.Sub(base)/m.Window + 1) * m.Window)
}

// ask is what the bucket should lease at now for its streams without an
// assignment: their predicted demand over the life of the assignment it
// would send (its TTL: an Envoy cannot spend a share after it expires), at
// most what the window has left of L for this sidecar; 0 for no lease.
// Each stream it counts is marked as asked for by lease id (the lease it
// will be, when the answer is at least 1); topUp reports that a stream
// that spent its assignment of the window is among them.
func (m *Machine) ask(b *Bucket, now time.Time, id uint64) (want int64, topUp bool) {
	// Before the window's grant, its end is unknown: the window begins now.
	left, room := m.ttl(now.Add(m.Window), now), m.Limit
	if b.inWindow(now) {
		if left = m.ttl(b.Until, now); left < time.Second {
			return 0, false // too late to assign anything in this window
		}
		room = m.Limit - (b.Leased - b.Returned)
	}
	var mean float64
	known, measured := false, false
	for i := range b.Streams {
		st := &b.Streams[i]
		if cur := b.current(st, now); cur && m.Fault&FaultTopUpDifference == 0 && !b.hungry(st, now) || !cur && now.Before(st.Live) {
			continue // want would say 0 (the report path's usual case)
		}
		if !measured {
			mean, known = b.mean()
			measured = true
		}
		if w := m.want(b, st, now, left, mean, known); w > 0 {
			want = min(want+w, m.Limit)
			st.Asked = id
			topUp = topUp || b.hungry(st, now)
		}
	}
	return min(want, room), topUp
}

// want is how many units stream st should get over left (the TTL of the
// assignment it would be sent) at now: 0 when it holds an assignment in
// the window it has not spent, or may still enforce one; otherwise its
// predicted demand (a stream that spent its assignment: over the rest of
// the window, as a fresh bucket).
func (m *Machine) want(b *Bucket, st *Stream, now time.Time, left time.Duration, mean float64, known bool) int64 {
	if b.current(st, now) {
		switch {
		case m.Fault&FaultTopUpDifference != 0:
			return max(m.demand(st, left, mean, known)-st.Share, 0)
		case b.hungry(st, now):
			return m.demand(st, left, mean, known)
		}
		return 0
	}
	if now.Before(st.Live) {
		return 0
	}
	return m.demand(st, left, mean, known)
}

// demand is st's predicted demand over left: its smoothed rate, or, unknown,
// the bucket's mean per-stream rate (when no rate is known, L/PriorShares
// per window: a sidecar whose Envoys have just subscribed leaves the rest
// of L to the fleet), at least 1 (its subscription carried a request); at
// most gale.MaxLimit (not Limit: capping a demand at L would skew the
// split).
func (m *Machine) demand(st *Stream, left time.Duration, mean float64, known bool) int64 {
	rate := st.Rate
	if !st.Known {
		rate = float64(m.Limit) / PriorShares / m.Window.Seconds()
		if known {
			rate = mean
		}
	}
	x := math.Ceil(rate * left.Seconds())
	switch {
	case x >= gale.MaxLimit:
		return gale.MaxLimit
	case !st.Known:
		return max(int64(x), 1)
	}
	return int64(x)
}

// assign splits granted units of lease id among the streams it was asked
// for that want some at now, max-min fairly by demand, appends their
// assignments to a.Assign, and returns the units left unassigned.
func (m *Machine) assign(b *Bucket, id uint64, now time.Time, granted int64, a *Actions) int64 {
	ttl := m.ttl(b.Until, now)
	if ttl < time.Second {
		return granted
	}
	mean, known := b.mean()
	w := b.sc.weights(len(b.Streams))
	for i := range b.Streams {
		if b.Streams[i].Asked == id {
			w[i] = m.want(b, &b.Streams[i], now, ttl, mean, known)
		}
	}
	groups := b.sc.groups(len(b.Streams))
	for i := range b.Streams {
		groups[i] = b.Streams[i].Group
	}
	shares := b.sc.divideGroups(granted, w, groups)
	b.buf = b.buf[:0]
	live := now.Add(ttl + m.guard())
	for i, n := range shares {
		if n == 0 {
			continue
		}
		st := &b.Streams[i]
		fresh := b.hungry(st, now) && m.Fault&FaultTopUpDifference == 0
		from := now
		if st.Window.IsZero() {
			from = now.Add(-m.guard()) // its first: see Stream.Assigned
		}
		if !b.current(st, now) || fresh {
			st.Share = 0 // a share of an older window, or a spent one
		}
		st.Window, st.Share, st.Live, st.Expires = b.WindowEnd, st.Share+n, live, now.Add(ttl)
		st.Denied, st.Assigned, st.Hungry = time.Time{}, from, time.Time{} // the assignment replaces a deny
		b.Sent += n
		granted -= n
		b.buf = append(b.buf, Assignment{Stream: st.ID, MaxTokens: st.Share, TokensPerFill: 1, FillInterval: m.fillInterval(), TTL: ttl, Fresh: fresh})
	}
	if len(b.buf) > 0 {
		a.Assign = b.buf
	}
	return granted
}

// ttl is the whole seconds an assignment sent at now lives for, its window
// ending at until: floor((until − now − Guard)/1 s), or less than a second
// (send nothing).
func (m *Machine) ttl(until, now time.Time) time.Duration {
	d := until.Sub(now)
	switch {
	case m.Fault&FaultCeilTTL != 0:
		if d <= 0 {
			return 0
		}
		return (d + time.Second - 1).Truncate(time.Second)
	case m.Fault&FaultNoGuard == 0:
		d -= m.guard()
	}
	if d < time.Second {
		return 0
	}
	return d.Truncate(time.Second)
}

// fillInterval is whole seconds ≥ 2 × Window: within a TTL, which is
// shorter than the window, a bucket refills less than half a token.
func (m *Machine) fillInterval() time.Duration {
	return (2*m.Window + time.Second - 1).Truncate(time.Second)
}

func (m *Machine) guard() time.Duration {
	if m.Guard == 0 {
		return DefaultGuard
	}
	return m.Guard
}

func (m *Machine) maxStreams() int {
	if m.MaxStreams == 0 {
		return DefaultMaxStreams
	}
	return m.MaxStreams
}

// enforced reports whether st's Envoy may still enforce at now what it was
// sent: an assignment until Live, a deny until Denied.
func (st *Stream) enforced(now time.Time) bool {
	return now.Before(st.Live) || now.Before(st.Denied)
}

// keepLeft keeps the record of st, which is leaving at now, while its
// Envoy may still enforce what it was sent (Bucket.Left), dropping the
// records that no longer matter; at most most are kept, the oldest going
// first.
func (b *Bucket) keepLeft(st Stream, now time.Time, most int) {
	b.Left = slices.DeleteFunc(b.Left, func(l Stream) bool { return !l.enforced(now) || l.Group == st.Group })
	if !st.enforced(now) {
		return
	}
	if len(b.Left) >= most {
		b.Left = append(b.Left[:0], b.Left[len(b.Left)-most+1:]...)
	}
	b.Left = append(b.Left, st)
}

// findLeft returns the index in Left of the record of group g's stream
// whose Envoy may still enforce what it was sent at now, -1 for none.
func (b *Bucket) findLeft(g uint64, now time.Time) int {
	for j := range b.Left {
		if b.Left[j].Group == g && b.Left[j].enforced(now) {
			return j
		}
	}
	return -1
}

// find returns the index of stream s, -1 when it is not subscribed.
func (b *Bucket) find(s StreamID) int {
	for i := range b.Streams {
		if b.Streams[i].ID == s {
			return i
		}
	}
	return -1
}

// clamp takes an instant earlier than one the bucket has seen as the latest
// it has seen: time never goes backwards for a bucket.
func (b *Bucket) clamp(now time.Time) time.Time {
	if now.Before(b.Last) {
		return b.Last
	}
	b.Last = now
	return now
}

// inWindow reports whether the window of the newest grant is in place at now.
func (b *Bucket) inWindow(now time.Time) bool {
	return !b.Until.IsZero() && now.Before(b.Until)
}

// current reports whether st holds an assignment of the window in place.
func (b *Bucket) current(st *Stream, now time.Time) bool {
	return !st.Window.IsZero() && st.Window.Equal(b.WindowEnd) && b.inWindow(now)
}

// hungry reports whether st spent its assignment of the window in place
// and is to be topped up (Stream.Hungry).
func (b *Bucket) hungry(st *Stream, now time.Time) bool {
	return !st.Hungry.IsZero() && st.Hungry.Equal(b.WindowEnd) && b.current(st, now)
}

// mean is the mean rate of the streams whose rate is known, and whether any is.
func (b *Bucket) mean() (float64, bool) {
	var sum float64
	var n int
	for i := range b.Streams {
		if b.Streams[i].Known {
			sum += b.Streams[i].Rate
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}
