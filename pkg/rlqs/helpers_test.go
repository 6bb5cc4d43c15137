package rlqs_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// t0 is the start of a window of 10 s (windows are aligned on the epoch).
var t0 = time.Unix(1_700_000_000, 0)

// windowStore is the store's contract for one windowed key, as the tests
// need it: leases up to what is left of L in the window of now, returns of
// the window in place. It is the reference the machine is checked against,
// not a stand-in for Redis: the store tests are pkg/gale's.
type windowStore struct {
	limit  int64
	window time.Duration
	end    time.Time
	used   int64
}

func (s *windowStore) roll(now time.Time) {
	end := now.Truncate(s.window).Add(s.window)
	if !end.Equal(s.end) {
		s.end, s.used = end, 0
	}
}

func (s *windowStore) lease(ask rlqs.LeaseAsk, now time.Time) gale.Grant {
	s.roll(now)
	n := min(ask.Max, s.limit-s.used)
	if n < ask.Min {
		return gale.Grant{Now: now, WindowEnd: s.end, Decision: gale.Decision{RetryAfter: s.end.Sub(now)}}
	}
	s.used += n
	return gale.Grant{Granted: n, Now: now, WindowEnd: s.end}
}

func (s *windowStore) giveBack(r gale.Return) {
	s.roll(r.At)
	if r.Credits > 0 && r.WindowEnd.Equal(s.end) {
		s.used = max(s.used-r.Credits, 0)
	}
}

// rig drives one machine and bucket over a windowStore, landing each lease
// at once, and records every assignment with the instant it was sent.
type rig struct {
	t     testing.TB
	m     rlqs.Machine
	b     rlqs.Bucket
	store *windowStore
	sent  []sentAssignment
	// denied are the blanket DENY_ALLs sent (Assignment.Deny), apart
	// from the token buckets in sent.
	denied []sentAssignment
	ret    int64
	// hold keeps asked leases in flight instead of landing them.
	hold    bool
	pending []pendingLease
	// wake is the instant the machine last asked to tick at.
	wake time.Time
}

type sentAssignment struct {
	rlqs.Assignment
	at    time.Time
	until time.Time // the bucket's window end when it was sent
}

type pendingLease struct {
	ask  rlqs.LeaseAsk
	sent time.Time
}

func newRig(t testing.TB, m rlqs.Machine) *rig {
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, m: m, store: &windowStore{limit: m.Limit, window: m.Window}}
}

// do carries out a's actions at now.
func (r *rig) do(now time.Time, a rlqs.Actions) {
	r.wake = a.Wake
	if a.Return.Credits > 0 {
		r.ret += a.Return.Credits
		r.store.giveBack(a.Return)
	}
	for _, x := range a.Assign {
		if x.Deny {
			r.denied = append(r.denied, sentAssignment{Assignment: x, at: now, until: r.b.Until})
			continue
		}
		r.sent = append(r.sent, sentAssignment{Assignment: x, at: now, until: r.b.Until})
	}
	if a.Lease.ID != 0 {
		if r.hold {
			r.pending = append(r.pending, pendingLease{a.Lease, now})
			return
		}
		g := r.store.lease(a.Lease, now)
		r.do(now, r.m.Landed(&r.b, a.Lease.ID, now, now, g))
	}
}

func (r *rig) report(now time.Time, s rlqs.StreamID, allowed, denied uint64, elapsed time.Duration) {
	r.t.Helper()
	a, err := r.m.Report(&r.b, now, s, allowed, denied, elapsed)
	if err != nil {
		r.t.Fatalf("report %d at %v: %v", s, now.Sub(t0), err)
	}
	r.do(now, a)
}

func (r *rig) tick(now time.Time)                   { r.do(now, r.m.Tick(&r.b, now)) }
func (r *rig) leave(now time.Time, s rlqs.StreamID) { r.do(now, r.m.Leave(&r.b, now, s)) }

// until ticks the machine at each instant it asks for, up to to.
func (r *rig) until(to time.Time) {
	r.t.Helper()
	for n := 0; !r.wake.IsZero() && !r.wake.After(to); n++ {
		if n > 10_000 {
			r.t.Fatalf("the machine keeps asking to tick at %v", r.wake.Sub(t0))
		}
		r.tick(r.wake)
	}
}

// land lands the oldest held lease at now.
func (r *rig) land(now time.Time) {
	p := r.pending[0]
	r.pending = r.pending[1:]
	g := r.store.lease(p.ask, p.sent)
	r.do(now, r.m.Landed(&r.b, p.ask.ID, p.sent, now, g))
}

// shares is the max_tokens sent to each stream since sent[from:], by stream.
func (r *rig) shares(from int) map[rlqs.StreamID]int64 {
	out := map[rlqs.StreamID]int64{}
	for _, s := range r.sent[from:] {
		out[s.Stream] = s.MaxTokens
	}
	return out
}

func (s sentAssignment) String() string {
	if s.Deny {
		return fmt.Sprintf("%d: DENY_ALL ttl %v at %v", s.Stream, s.TTL, s.at.Sub(t0))
	}
	return fmt.Sprintf("%d: %d tokens ttl %v at %v", s.Stream, s.MaxTokens, s.TTL, s.at.Sub(t0))
}
