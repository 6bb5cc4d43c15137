package rlqs

import (
	"math"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// next asks the bucket's lease if one is due at now, and sets the instant
// the driver must tick at.
func (m *Machine) next(b *Bucket, now time.Time, a *Actions) {
	if b.Lease == 0 && !now.Before(b.RefusedUntil) {
		if want := m.ask(b, now, b.Leases+1); want >= 1 {
			b.Leases++
			b.Lease, b.LeaseSent = b.Leases, now
			a.Lease = LeaseAsk{ID: b.Lease, Min: 1, Max: want}
		}
	}
	if b.Lease == 0 {
		m.denyStarved(b, now, a)
	}
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
}

// denyStarved sends a blanket DENY_ALL to each stream that holds no
// assignment of the window in place, enforces no older one and has not
// been told to deny already: while a window is in place with no lease in
// flight (what a stream did not get, it will not get before the window
// ends, but from a lease a later report asks), or while the store has
// said its window is spent. The deny lasts until that window's end,
// rounded up to whole seconds.
func (m *Machine) denyStarved(b *Bucket, now time.Time, a *Actions) {
	end := b.Spent
	if b.inWindow(now) {
		end = b.Until
	}
	if !now.Before(end) {
		return
	}
	ttl := (end.Sub(now) + time.Second - 1).Truncate(time.Second)
	for i := range b.Streams {
		st := &b.Streams[i]
		if b.current(st, now) || now.Before(st.Live) || now.Before(st.Denied) {
			continue
		}
		st.Denied = now.Add(ttl)
		a.Assign = append(a.Assign, Assignment{Stream: st.ID, TTL: ttl, Deny: true})
	}
}

// ask is what the bucket should lease at now for its streams without an
// assignment: their predicted demand over the life of the assignment it
// would send (its TTL: an Envoy cannot spend a share after it expires), at
// most what the window has left of L for this sidecar; 0 for no lease.
// Each stream it counts is marked as asked for by lease id (the lease it
// will be, when the answer is at least 1).
func (m *Machine) ask(b *Bucket, now time.Time, id uint64) int64 {
	// Before the window's grant, its end is unknown: the window begins now.
	left, room := m.ttl(now.Add(m.Window), now), m.Limit
	if b.inWindow(now) {
		if left = m.ttl(b.Until, now); left < time.Second {
			return 0 // too late to assign anything in this window
		}
		room = m.Limit - (b.Leased - b.Returned)
	}
	var want int64
	var mean float64
	known, measured := false, false
	for i := range b.Streams {
		st := &b.Streams[i]
		if cur := b.current(st, now); cur && m.Fault&FaultTopUpDifference == 0 || !cur && now.Before(st.Live) {
			continue // want would say 0 (the report path's usual case)
		}
		if !measured {
			mean, known = b.mean()
			measured = true
		}
		if w := m.want(b, st, now, left, mean, known); w > 0 {
			want = min(want+w, m.Limit)
			st.Asked = id
		}
	}
	return min(want, room)
}

// want is how many units stream st should get over left (the TTL of the
// assignment it would be sent) at now: 0 when it holds an assignment in
// the window, or may still enforce one; otherwise its predicted demand.
func (m *Machine) want(b *Bucket, st *Stream, now time.Time, left time.Duration, mean float64, known bool) int64 {
	if b.current(st, now) {
		if m.Fault&FaultTopUpDifference != 0 {
			return max(m.demand(st, left, mean, known)-st.Share, 0)
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
		if !b.current(st, now) {
			st.Share = 0 // a share of an older window
		}
		st.Window, st.Share, st.Live = b.WindowEnd, st.Share+n, live
		b.Sent += n
		granted -= n
		b.buf = append(b.buf, Assignment{Stream: st.ID, MaxTokens: st.Share, TokensPerFill: 1, FillInterval: m.fillInterval(), TTL: ttl})
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
