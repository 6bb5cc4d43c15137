package rlqs_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

var m10 = rlqs.Machine{Limit: 50, Window: 10 * time.Second}

// subscribe3 subscribes streams 1..3 in the first window and has them
// report demands of 1, 2 and 7 requests per second.
// subscribe3 subscribes streams 1–3 as Envoys with no_assignment_behavior
// DENY_ALL (their first request denied), and reports their demand at 5 s.
func subscribe3(r *rig) { subscribe3As(r, false) }

// subscribe3As is subscribe3 for Envoys whose first request is allowed
// (allowAll: Envoy's default no_assignment_behavior, ALLOW_ALL) or denied.
func subscribe3As(r *rig, allowAll bool) {
	for s := rlqs.StreamID(1); s <= 3; s++ {
		if allowAll {
			r.report(t0.Add(100*time.Millisecond), s, 1, 0, 0)
		} else {
			r.report(t0.Add(100*time.Millisecond), s, 0, 1, 0)
		}
	}
	r.report(t0.Add(5*time.Second), 1, 5, 0, 5*time.Second)
	r.report(t0.Add(5*time.Second), 2, 0, 10, 5*time.Second)
	r.report(t0.Add(5*time.Second), 3, 5, 30, 5*time.Second)
}

func TestWindowSplitByDemand(t *testing.T) {
	r := newRig(t, m10)
	subscribe3(r)
	// No rate is known at the subscriptions: each stream is predicted at
	// L/PriorShares = 50/8 per 10 s window, 0.625/s, over its 9 s TTL:
	// ⌈5.625⌉ = 6 each, 18 of 50 leased; the rest stays in the store for
	// the fleet (the limit's pace gave stream 1 all 50).
	if len(r.sent) < 3 || r.sent[0].MaxTokens != 6 || r.sent[1].MaxTokens != 6 || r.sent[2].MaxTokens != 6 || r.sent[2].at != t0.Add(100*time.Millisecond) {
		t.Fatalf("first window: %v: want 6 to each of the three at their subscriptions, 18 leased", r.sent)
	}
	if r.sent[0].TTL != 9*time.Second || r.sent[0].FillInterval != 20*time.Second || r.sent[0].TokensPerFill != 1 {
		t.Fatalf("first assignment %+v: want TTL 9 s (floor of 9.9 − 0.25), fill 20 s, 1 per fill", r.sent[0])
	}
	// At 5 s streams 2 and 3 report denials over the whole interval since
	// their assignments: they spent them, and are topped up from the 32
	// left, each with its demand over the 4 s TTL left (2/s: 8; 7/s: 28,
	// of which 24 are left), as fresh buckets. Stream 1 denied nothing.
	if up := r.sent[3:]; len(up) != 2 || up[0].Stream != 2 || up[0].MaxTokens != 8 || !up[0].Fresh || up[1].Stream != 3 || up[1].MaxTokens != 24 || !up[1].Fresh || up[1].TTL != 4*time.Second {
		t.Fatalf("top-ups at 5 s: %v, want stream 2 8 and stream 3 24, fresh, for 4 s", up)
	}
	if r.b.Leased != 50 || r.b.Sent != 50 {
		t.Fatalf("first window: leased %d sent %d, want 50 50", r.b.Leased, r.b.Sent)
	}
	n := len(r.sent)
	r.tick(t0.Add(10 * time.Second))
	got := r.shares(n)
	if got[1] != 9 || got[2] != 18 || got[3] != 23 {
		t.Fatalf("second window shares %v, want 9, 18, 23 (demands 1, 2, 7 /s over the 9 s TTL: 9, 18, 63, split 50 max-min fairly)", got)
	}
	for _, s := range r.sent[n:] {
		if s.TTL != 9*time.Second {
			t.Errorf("%v: want TTL 9 s", s)
		}
	}
	if r.b.Leased != 50 || r.b.Sent != 50 {
		t.Errorf("leased %d sent %d, want 50 50", r.b.Leased, r.b.Sent)
	}
}

// TestLeaseAsksDemandOverTheTTL: at a window's start a stream of known
// demand (2/s) is leased its demand over the assignment's TTL (⌊10 −
// 0.25⌋ = 9 s: 18), not over the window (20): an Envoy cannot spend a
// share after its assignment expires, so the 2 more would sit unused while
// another sidecar's Envoys could spend them. Mid-window, a subscriber asks
// over its own TTL (at 12.5 s: ⌊7.5 − 0.25⌋ = 7 s, 14), not the 7.5 s left.
func TestLeaseAsksDemandOverTheTTL(t *testing.T) {
	r := newRig(t, rlqs.Machine{Limit: 100, Window: 10 * time.Second})
	r.report(t0.Add(100*time.Millisecond), 1, 0, 1, 0)
	r.report(t0.Add(5*time.Second), 1, 10, 0, 5*time.Second) // 2/s
	r.hold = true
	r.tick(t0.Add(10 * time.Second))
	if len(r.pending) != 1 || r.pending[0].ask.Max != 18 {
		t.Fatalf("lease at the window's start %+v, want one asking 18 (2/s × 9 s TTL, not × 10 s window)", r.pending)
	}
	n := len(r.sent)
	r.land(t0.Add(10 * time.Second))
	if got := r.shares(n); got[1] != 18 || r.sent[n].TTL != 9*time.Second || r.ret != 0 {
		t.Fatalf("assigned %v, returned %d: want 18 for 9 s, nothing back", r.sent[n:], r.ret)
	}
	r.report(t0.Add(12500*time.Millisecond), 2, 0, 1, 0) // unknown: the mean, 2/s
	if len(r.pending) != 1 || r.pending[0].ask.Max != 14 {
		t.Fatalf("subscriber's lease %+v, want one asking 14 (2/s × 7 s TTL, not × 7.5 s left)", r.pending)
	}
}

// TestUnknownDemandLeavesTheRestForOthers: two sidecars over one store,
// L 400 per 10 s, four Envoys subscribing to each at the window's start,
// no rate known anywhere. Each Envoy is predicted at L/PriorShares = 50 per
// window, 5/s, over its 9 s TTL: 45; each sidecar leases 180 and the
// other's Envoys are served too (360 of 400). The limit's pace (400 per
// window) gave sidecar A's first Envoy all of L and left sidecar B's four
// Envoys nothing for a window.
func TestUnknownDemandLeavesTheRestForOthers(t *testing.T) {
	m := rlqs.Machine{Limit: 400, Window: 10 * time.Second}
	a, b := newRig(t, m), newRig(t, m)
	b.store = a.store
	for s := rlqs.StreamID(1); s <= 4; s++ {
		a.report(t0.Add(100*time.Millisecond), s, 0, 1, 0)
	}
	for s := rlqs.StreamID(1); s <= 4; s++ {
		b.report(t0.Add(200*time.Millisecond), s, 0, 1, 0)
	}
	for name, r := range map[string]*rig{"A": a, "B": b} {
		got := r.shares(0)
		if len(got) != 4 || r.b.Leased != 180 || r.b.Sent != 180 {
			t.Errorf("sidecar %s: %v, leased %d sent %d: want 45 to each of its 4 Envoys, 180", name, r.sent, r.b.Leased, r.b.Sent)
		}
		for s, n := range got {
			if n != 45 {
				t.Errorf("sidecar %s stream %d: %d, want 45", name, s, n)
			}
		}
	}
	if a.store.used != 360 {
		t.Errorf("store used %d, want 360 (40 left for later subscribers)", a.store.used)
	}
}

func TestLargestRemainder(t *testing.T) {
	r := newRig(t, rlqs.Machine{Limit: 10, Window: 10 * time.Second})
	for s := rlqs.StreamID(1); s <= 3; s++ {
		r.report(t0.Add(time.Second), s, 0, 1, 0)
	}
	for s := rlqs.StreamID(1); s <= 3; s++ {
		r.report(t0.Add(5*time.Second), s, 10, 0, 5*time.Second) // 2/s each
	}
	n := len(r.sent)
	r.tick(t0.Add(10 * time.Second))
	got := r.shares(n)
	// 10 among three equal demands of 20: 3.33 each, the remainder's unit
	// to the earliest subscriber.
	if got[1] != 4 || got[2] != 3 || got[3] != 3 {
		t.Fatalf("shares %v, want 4 3 3", got)
	}
}

func TestMidWindowSubscriberGetsOnlyUnassigned(t *testing.T) {
	m := rlqs.Machine{Limit: 100, Window: 10 * time.Second}
	r := newRig(t, m)
	r.report(t0.Add(100*time.Millisecond), 1, 0, 1, 0)
	r.report(t0.Add(5*time.Second), 1, 10, 0, 5*time.Second) // 2/s
	r.tick(t0.Add(10 * time.Second))                         // window 2: 2/s over the 9 s TTL
	if r.b.Leased != 18 || r.b.Sent != 18 {
		t.Fatalf("leased %d sent %d, want 18 18 (2/s over the 9 s TTL)", r.b.Leased, r.b.Sent)
	}
	n := len(r.sent)
	// A subscriber at 15 s: unknown demand, the mean rate (2/s) over its
	// TTL ⌊5 − 0.25⌋ = 4 s: 8, from the 82 not leased.
	r.report(t0.Add(15*time.Second), 2, 0, 1, 0)
	if got := r.shares(n); len(got) != 1 || got[2] != 8 || r.sent[n].TTL != 4*time.Second {
		t.Fatalf("subscriber got %v, want stream 2 alone with 8 for 4 s", r.sent[n:])
	}
	if r.b.Leased != 26 || r.store.used != 26 {
		t.Fatalf("leased %d, store used %d: want 26 26", r.b.Leased, r.store.used)
	}

	// When the window is fully leased, a subscriber gets nothing, and
	// nobody's share is touched.
	r2 := newRig(t, m10)
	subscribe3(r2)
	r2.tick(t0.Add(10 * time.Second))
	n = len(r2.sent)
	r2.report(t0.Add(12*time.Second), 4, 1, 0, 0) // ALLOW_ALL: its first request admitted
	if len(r2.sent) != n || r2.pending != nil {
		t.Fatalf("subscriber to a fully leased window: sent %v", r2.sent[n:])
	}
	// It is told to deny until a second past the window's end (at 20 s):
	// under Envoy's default ALLOW_ALL it would admit unmetered.
	var at12 []sentAssignment
	for _, d := range r2.denied {
		if d.at.Equal(t0.Add(12 * time.Second)) {
			at12 = append(at12, d)
		}
	}
	if len(at12) != 1 || at12[0].Stream != 4 || at12[0].TTL != 9*time.Second {
		t.Fatalf("subscriber to a fully leased window: denied %v, want stream 4 alone, for 9 s", at12)
	}
	if r2.b.Lease != 0 {
		t.Fatalf("lease %d asked of a fully leased window", r2.b.Lease)
	}
}

func TestLeaveKeepsUnitsChargedUntilWindowEnd(t *testing.T) {
	r := newRig(t, m10)
	subscribe3(r)
	r.tick(t0.Add(10 * time.Second))
	r.leave(t0.Add(12*time.Second), 3) // held 23
	if r.ret != 0 || r.b.Sent != 50 {
		t.Fatalf("leave returned %d, sent now %d: want 0 and 50 (the Envoy enforces its 23 until its TTL)", r.ret, r.b.Sent)
	}
	// Its reconnect is a new subscriber: nothing is left in the window.
	n := len(r.sent)
	r.report(t0.Add(13*time.Second), 33, 0, 1, 0)
	if len(r.sent) != n {
		t.Fatalf("reconnect got %v mid-window", r.sent[n:])
	}
	// The next window splits among who is there.
	r.tick(t0.Add(20 * time.Second))
	got := r.shares(n)
	if _, ok := got[3]; ok || got[33] == 0 {
		t.Fatalf("third window: %v, want the reconnect served and the gone stream not", got)
	}
}

func TestFaultReassignOnLeaveGivesBack(t *testing.T) {
	m := m10
	m.Fault = rlqs.FaultReassignOnLeave
	r := newRig(t, m)
	subscribe3(r)
	r.tick(t0.Add(10 * time.Second))
	r.leave(t0.Add(12*time.Second), 3)
	if r.ret != 23 {
		t.Fatalf("faulty leave returned %d, want 23", r.ret)
	}
}

func TestTTL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		guard time.Duration
		fault rlqs.Fault
		at    time.Duration // landing instant in the window of 10 s
		want  time.Duration // 0: nothing sent, all returned
	}{
		{"floor", 0, 0, 6300 * time.Millisecond, 3 * time.Second},       // 3.7 − .25
		{"just one second", 0, 0, 8750 * time.Millisecond, time.Second}, // 1.25 − .25
		{"under one second", 0, 0, 8800 * time.Millisecond, 0},          // 0.95
		{"guard covers it", 500 * time.Millisecond, 0, 8600 * time.Millisecond, 0},
		{"guard leaves one", 500 * time.Millisecond, 0, 8500 * time.Millisecond, time.Second},
		{"ceil fault outlives", 0, rlqs.FaultCeilTTL, 6300 * time.Millisecond, 4 * time.Second},
		{"no guard fault", 0, rlqs.FaultNoGuard, 8800 * time.Millisecond, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := rlqs.Machine{Limit: 10, Window: 10 * time.Second, Guard: tc.guard, Fault: tc.fault}
			r := newRig(t, m)
			r.report(t0.Add(tc.at), 1, 0, 1, 0)
			switch {
			case tc.want == 0 && (len(r.sent) != 0 || r.ret != r.b.Leased || r.ret == 0):
				t.Fatalf("sent %v, returned %d of %d: want nothing sent, all returned", r.sent, r.ret, r.b.Leased)
			case tc.want != 0 && (len(r.sent) != 1 || r.sent[0].TTL != tc.want):
				t.Fatalf("sent %v, want one with TTL %v", r.sent, tc.want)
			}
			if tc.want == 0 {
				// No lease again before the window has moved on.
				r.report(t0.Add(tc.at+100*time.Millisecond), 1, 0, 1, 100*time.Millisecond)
				if r.b.Leases != 1 {
					t.Fatalf("%d leases, want 1", r.b.Leases)
				}
			}
		})
	}
}

// TestAssignmentsEndBeforeWindow: over many windows of reports, every
// assignment (sent + TTL + Guard) ends by its window's end, and no stream
// is sent two in one window but a fresh top-up (no equal resend); under
// FaultRefreshTTL the check fails.
func TestAssignmentsEndBeforeWindow(t *testing.T) {
	for _, tc := range []struct {
		fault rlqs.Fault
		bad   bool
	}{{0, false}, {rlqs.FaultRefreshTTL, true}, {rlqs.FaultCeilTTL, true}} {
		m := m10
		m.Fault = tc.fault
		r := newRig(t, m)
		subscribe3(r)
		for at := 5 * time.Second; at < 60*time.Second; at += 1700 * time.Millisecond {
			for s := rlqs.StreamID(1); s <= 3; s++ {
				r.report(t0.Add(at), s, uint64(s), 1, 1700*time.Millisecond)
			}
			r.tick(t0.Add(at))
		}
		bad := 0
		per := map[[2]int64]int{}
		for _, s := range r.sent {
			if s.at.Add(s.TTL + rlqs.DefaultGuard).After(s.until) {
				bad++
			}
			k := [2]int64{int64(s.Stream), s.until.Unix()}
			if per[k]++; per[k] > 1 && !s.Fresh {
				bad++
			}
		}
		if (bad > 0) != tc.bad {
			t.Errorf("fault %d: %d bad assignments of %d, want bad %v", tc.fault, bad, len(r.sent), tc.bad)
		}
	}
}

func TestReturnsUnassigned(t *testing.T) {
	r := newRig(t, m10)
	r.hold = true
	subscribe3(r) // one lease in flight, for stream 1: ⌈50/8 per 10 s × 9 s⌉ = 6
	if len(r.pending) != 1 {
		t.Fatalf("%d leases in flight, want 1", len(r.pending))
	}
	// Everyone leaves before it lands: all goes back.
	for s := rlqs.StreamID(1); s <= 3; s++ {
		r.leave(t0.Add(6*time.Second), s)
	}
	r.land(t0.Add(6 * time.Second))
	if r.ret != 6 || r.store.used != 0 || len(r.sent) != 0 {
		t.Fatalf("returned %d, store used %d, sent %v: want all 6 back", r.ret, r.store.used, r.sent)
	}
	if r.b.Sent+r.b.Returned != r.b.Leased {
		t.Fatalf("sent %d + returned %d ≠ leased %d", r.b.Sent, r.b.Returned, r.b.Leased)
	}
	// A grant of a lease not in flight goes back whole.
	a := r.m.Landed(&r.b, 99, t0.Add(7*time.Second), t0.Add(7*time.Second), gale.Grant{Granted: 4, WindowEnd: t0.Add(10 * time.Second), Now: t0.Add(7 * time.Second)})
	if a.Return.Credits != 4 || len(a.Assign) != 0 {
		t.Fatalf("stray grant: %+v, want its 4 back", a)
	}
}

func TestOneLeaseInFlight(t *testing.T) {
	r := newRig(t, m10)
	r.hold = true
	for s := rlqs.StreamID(1); s <= 5; s++ {
		r.report(t0.Add(time.Duration(s)*100*time.Millisecond), s, 0, 1, 0)
	}
	r.tick(t0.Add(time.Second))
	if len(r.pending) != 1 {
		t.Fatalf("%d leases asked, want 1", len(r.pending))
	}
	// It lands for the stream it was asked for; the four that subscribed
	// while it was in flight ask their own lease next, so each gets what
	// its demand predicts. (Split among all five, the one stream's share
	// went to five: issue 41, item 1.)
	r.land(t0.Add(time.Second))
	first := r.shares(0)
	if len(first) != 1 || first[1] == 0 {
		t.Fatalf("shares %v, want stream 1's alone", first)
	}
	if len(r.pending) != 1 {
		t.Fatalf("%d leases asked after the first landed, want 1 for the four others", len(r.pending))
	}
	r.land(t0.Add(time.Second))
	got := r.shares(0)
	for s := rlqs.StreamID(1); s <= 5; s++ {
		if got[s] != first[1] {
			t.Fatalf("shares %v, want %d each (the same predicted demand)", got, first[1])
		}
	}
}

func TestBadInputs(t *testing.T) {
	r := newRig(t, m10)
	if _, err := r.m.Report(&r.b, t0, 1, rlqs.MaxReportCount, 1, time.Second); !errors.Is(err, rlqs.ErrInvalidReport) {
		t.Errorf("huge counts: %v", err)
	}
	if _, err := r.m.Report(&r.b, t0, 1, ^uint64(0), ^uint64(0), time.Second); !errors.Is(err, rlqs.ErrInvalidReport) {
		t.Errorf("overflowing counts: %v", err)
	}
	if _, err := r.m.Report(&r.b, t0, 1, 1, 0, -time.Second); !errors.Is(err, rlqs.ErrInvalidReport) {
		t.Errorf("negative elapsed: %v", err)
	}
	if len(r.b.Streams) != 0 {
		t.Fatalf("bad reports subscribed %v", r.b.Streams)
	}
	// Elapsed 0 with counts: a subscription, no rate.
	r.report(t0.Add(time.Second), 1, 7, 7, 0)
	if r.b.Streams[0].Known {
		t.Errorf("elapsed 0 made a rate")
	}
	// Zero counts over time: a known rate of 0, no demand.
	r.report(t0.Add(2*time.Second), 2, 0, 0, time.Second)
	if st := r.b.Streams[1]; !st.Known || st.Rate != 0 {
		t.Errorf("zero counts: %+v", st)
	}
	// Time going backwards is taken as the latest instant seen.
	last := r.b.Last
	r.report(t0.Add(-time.Hour), 1, 1, 0, time.Second)
	r.tick(t0.Add(-time.Hour))
	if !r.b.Last.Equal(last) {
		t.Errorf("time went back to %v", r.b.Last)
	}
	for _, s := range r.sent {
		if s.at.Add(s.TTL).After(s.until) {
			t.Errorf("%v outlives its window", s)
		}
	}
	// Too many streams.
	m := m10
	m.MaxStreams = 2
	r2 := newRig(t, m)
	r2.report(t0, 1, 0, 1, 0)
	r2.report(t0, 2, 0, 1, 0)
	if _, err := r2.m.Report(&r2.b, t0, 3, 0, 1, 0); !errors.Is(err, rlqs.ErrTooManyStreams) {
		t.Errorf("third stream: %v", err)
	}
	// Leave and Failed of what the bucket does not know change nothing.
	r2.leave(t0, 9)
	r2.do(t0, r2.m.Failed(&r2.b, 77, t0))
	if len(r2.b.Streams) != 2 {
		t.Errorf("streams %v", r2.b.Streams)
	}
	for _, bad := range []rlqs.Machine{
		{Limit: 0, Window: 10 * time.Second},
		{Limit: gale.MaxLimit + 1, Window: 10 * time.Second},
		{Limit: 1, Window: time.Second},
		{Limit: 1, Window: 2 * time.Second, Guard: 1500 * time.Millisecond},
		{Limit: 1, Window: 2 * time.Second, Guard: -1},
		{Limit: 1, Window: 2 * time.Second, MaxStreams: -1},
	} {
		if err := bad.Validate(); !errors.Is(err, rlqs.ErrInvalidMachine) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestRefusalWaits(t *testing.T) {
	r := newRig(t, m10)
	r.store.roll(t0)
	r.store.used = 50 // another sidecar took the window
	r.report(t0.Add(time.Second), 1, 0, 1, 0)
	if r.b.Leases != 1 || !r.b.RefusedUntil.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("leases %d, refused until %v", r.b.Leases, r.b.RefusedUntil.Sub(t0))
	}
	r.report(t0.Add(5*time.Second), 1, 0, 5, 4*time.Second)
	if r.b.Leases != 1 {
		t.Fatalf("asked again while refused")
	}
	a := r.m.Tick(&r.b, t0.Add(10*time.Second))
	if a.Lease.ID == 0 {
		t.Fatalf("no lease at the window's end")
	}
}

// TestUnvalidatedMachineDoesNotPanic: a Machine that Validate refuses
// (zero, or a zero window) serves no sensible assignments, but events on
// it never panic.
func TestUnvalidatedMachineDoesNotPanic(t *testing.T) {
	for _, m := range []rlqs.Machine{{}, {Limit: 5}, {Window: time.Second}, {Limit: -3, Window: -time.Second, Guard: -time.Second}} {
		var b rlqs.Bucket
		now := t0
		for i := range 20 {
			a, _ := m.Report(&b, now, rlqs.StreamID(i%3), uint64(i), 1, time.Duration(i%2)*time.Second)
			if a.Lease.ID != 0 {
				m.Landed(&b, a.Lease.ID, now, now, gale.Grant{Granted: a.Lease.Max, Now: now, WindowEnd: now.Add(time.Duration(i) * time.Second)})
			}
			m.Tick(&b, now)
			if i%5 == 4 {
				m.Leave(&b, now, rlqs.StreamID(i%3))
			}
			now = now.Add(700 * time.Millisecond)
		}
	}
}

// TestStoreAheadWaitsForLiveAssignments: a store whose clock is ahead
// answers a lease asked late in window 1 with window 2 (on the sidecar's
// clock it ends 10 s after the store's now). A stream whose window-1
// assignment may still be enforced gets nothing from it; the machine
// asks to tick when that assignment is dead, and serves the stream then.
func TestStoreAheadWaitsForLiveAssignments(t *testing.T) {
	m := m10
	var b rlqs.Bucket
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	a, _ := m.Report(&b, at(100*time.Millisecond), 1, 0, 1, 0)
	a = m.Landed(&b, a.Lease.ID, at(100*time.Millisecond), at(100*time.Millisecond), gale.Grant{Granted: 20, Now: at(100 * time.Millisecond), WindowEnd: at(10 * time.Second)})
	if len(a.Assign) != 1 || a.Assign[0].TTL != 9*time.Second {
		t.Fatalf("window 1: %+v", a)
	}
	live := at(100*time.Millisecond + 9*time.Second + rlqs.DefaultGuard)
	m.Report(&b, at(5*time.Second), 1, 5, 0, 5*time.Second)
	a, _ = m.Report(&b, at(8500*time.Millisecond), 2, 0, 1, 0)
	if a.Lease.ID == 0 {
		t.Fatal("no lease for the subscriber")
	}
	// The store's clock reads 10 s: its window 2.
	a = m.Landed(&b, a.Lease.ID, at(8500*time.Millisecond), at(8600*time.Millisecond), gale.Grant{Granted: 30, Now: at(10 * time.Second), WindowEnd: at(20 * time.Second)})
	for _, x := range a.Assign {
		if x.Stream == 1 && !x.Deny { // a deny seals its bucket
			t.Fatalf("stream 1 assigned while its window-1 bucket may live: %+v", x)
		}
	}
	// Before it: the seal of stream 1's assignment (DENY_ALL two Guards
	// before it expires).
	for a.Wake.Before(live) {
		a = m.Tick(&b, a.Wake)
	}
	if !a.Wake.Equal(live) {
		t.Fatalf("wake at %v, want %v (stream 1's assignment dead)", a.Wake.Sub(t0), live.Sub(t0))
	}
	a = m.Tick(&b, live)
	if a.Lease.ID == 0 {
		t.Fatal("no lease once stream 1's assignment is dead")
	}
	a = m.Landed(&b, a.Lease.ID, live, live, gale.Grant{Granted: a.Lease.Max, Now: live.Add(1500 * time.Millisecond), WindowEnd: at(20 * time.Second)})
	if len(a.Assign) != 1 || a.Assign[0].Stream != 1 {
		t.Fatalf("stream 1 not served: %+v", a)
	}
	if end := live.Add(a.Assign[0].TTL + rlqs.DefaultGuard); end.After(b.Until) {
		t.Fatalf("its assignment ends %v, after the window's %v", end.Sub(t0), b.Until.Sub(t0))
	}
}

// TestStarvedStreamsAreDenied (issue 41, item 6): another sidecar has
// leased the whole window; this one's lease is refused, and each of its
// streams is told DENY_ALL until the store's window ends, once: under
// Envoy's default no_assignment_behavior (ALLOW_ALL) they admitted
// without limit for the whole window. The deny lasts a second past the
// window's end; the next window's assignments replace it.
func TestStarvedStreamsAreDenied(t *testing.T) {
	r := newRig(t, m10)
	subscribe3As(r, true)
	r.store.roll(t0.Add(10 * time.Second))
	r.store.used = r.store.limit // the other sidecar's
	r.tick(t0.Add(10 * time.Second))
	if len(r.denied) != 3 {
		t.Fatalf("denied %v, want the three streams", r.denied)
	}
	for _, d := range r.denied {
		if d.TTL != 11*time.Second || d.MaxTokens != 0 {
			t.Errorf("%v: want DENY_ALL for the 10 s to the window's end and a second more", d)
		}
	}
	r.report(t0.Add(15*time.Second), 1, 0, 9, 5*time.Second)
	if len(r.denied) != 3 {
		t.Fatalf("denied again mid-window: %v", r.denied[3:])
	}
	n := len(r.sent)
	r.tick(t0.Add(20 * time.Second))
	if got := r.shares(n); len(got) != 3 {
		t.Fatalf("next window: %v, want the three streams assigned", r.sent[n:])
	}

	// Envoys whose first request was denied (no_assignment_behavior
	// DENY_ALL) deny without an assignment: they are told nothing.
	r = newRig(t, m10)
	subscribe3(r)
	r.store.roll(t0.Add(10 * time.Second))
	r.store.used = r.store.limit
	r.tick(t0.Add(10 * time.Second))
	r.until(t0.Add(40 * time.Second))
	if len(r.denied) != 0 {
		t.Fatalf("Envoys that fail closed told %v", r.denied)
	}
}

// TestEnvoysAreNeverLeftUncovered (issue 41): from its first assignment
// on, each stream always holds a token bucket or a DENY_ALL the sidecar
// sent (taken as arriving when sent): under Envoy's default
// no_assignment_behavior, ALLOW_ALL, an Envoy with neither admits without
// limit. Before, an assignment expired Guard and the TTL's rounding before
// its window ended, leaving the Envoy unmetered until the next window's
// arrived; and an Envoy whose demand was known to be 0 was sent nothing
// in the next window, so its next burst went unmetered until its report.
// Three streams over six windows of 10 s, L = 50: one at 2 per second,
// one quiet after its first request, one hot at 10 per second.
func TestEnvoysAreNeverLeftUncovered(t *testing.T) {
	r := newRig(t, m10)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for s := rlqs.StreamID(1); s <= 3; s++ {
		r.report(at(1500*time.Millisecond), s, 1, 0, 0)
	}
	end := at(60 * time.Second)
	for tick := at(6500 * time.Millisecond); tick.Before(end); tick = tick.Add(5 * time.Second) {
		r.until(tick)
		r.report(tick, 1, 10, 0, 5*time.Second)
		r.report(tick, 2, 0, 0, 5*time.Second)
		r.report(tick, 3, 20, 30, 5*time.Second)
	}
	r.until(end)
	for s := rlqs.StreamID(1); s <= 3; s++ {
		var told []sentAssignment
		for _, x := range append(append([]sentAssignment(nil), r.sent...), r.denied...) {
			if x.Stream == s {
				told = append(told, x)
			}
		}
		slices.SortFunc(told, func(a, b sentAssignment) int { return a.at.Compare(b.at) })
		if len(told) == 0 {
			t.Fatalf("stream %d: told nothing", s)
		}
		covered := told[0].at
		for i, x := range told {
			if x.at.After(covered) {
				t.Errorf("stream %d: nothing in force from %v to %v (told %v)", s, covered.Sub(t0), x.at.Sub(t0), told[max(i-1, 0):i+1])
			}
			covered = x.at.Add(x.TTL) // the newest replaces what was in force
		}
		if covered.Before(end) {
			t.Errorf("stream %d: nothing in force from %v to the run's end", s, covered.Sub(t0))
		}
	}
	perWindow := map[time.Time]int64{}
	for _, x := range r.sent {
		perWindow[x.until] += x.MaxTokens
	}
	for w, n := range perWindow {
		if n > m10.Limit {
			t.Errorf("window ending %v: assigned %d > L %d", w.Sub(t0), n, m10.Limit)
		}
	}
}

// TestAStreamResetOnItsConnectionKeepsItsRecord (issue 41): an Envoy whose
// stream resets while its connection stays sends its next periodic report
// on a new stream of the same group; the new stream takes the old one's
// record over (its share of the window, its deny), so it is neither
// assigned a second time in the window nor told DENY_ALL over the bucket
// it still holds. Before, the reconnect was a new subscriber: with the
// window's L assigned, it was told DENY_ALL, which replaced its live
// bucket. A new connection, or an immediate report (a bucket the Envoy
// just made), is a new subscriber still.
func TestAStreamResetOnItsConnectionKeepsItsRecord(t *testing.T) {
	m := rlqs.Machine{Limit: 20, Window: 10 * time.Second}
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tc := range []struct {
		name      string
		group     uint64
		elapsed   time.Duration
		takesOver bool
	}{
		{"same connection", 7, 5 * time.Second, true},
		{"a new connection", 8, 5 * time.Second, false},
		{"same connection, a bucket just made", 7, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, m)
			a, err := r.m.ReportFrom(&r.b, at(time.Second), 1, 7, 1, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.do(at(time.Second), a)
			a, err = r.m.ReportFrom(&r.b, at(time.Second), 2, 9, 1, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			r.do(at(time.Second), a)
			r.store.used = r.store.limit // the rest of the window went to other sidecars
			share := r.shares(0)[1]
			if share == 0 {
				t.Fatalf("stream 1 not assigned: %v", r.sent)
			}
			r.leave(at(3*time.Second), 1)
			sent, denied := len(r.sent), len(r.denied)
			a, err = r.m.ReportFrom(&r.b, at(5*time.Second), 3, tc.group, 4, 0, tc.elapsed)
			if err != nil {
				t.Fatal(err)
			}
			r.do(at(5*time.Second), a)
			var toNew []sentAssignment
			for _, x := range append(r.sent[sent:], r.denied[denied:]...) {
				if x.Stream == 3 {
					toNew = append(toNew, x)
				}
			}
			i := slices.IndexFunc(r.b.Streams, func(s rlqs.Stream) bool { return s.ID == 3 })
			if tc.takesOver {
				if len(toNew) != 0 || r.b.Streams[i].Share != share {
					t.Fatalf("the reset stream's successor was told %v, holds %d: want nothing told, its %d", toNew, r.b.Streams[i].Share, share)
				}
				return
			}
			if len(toNew) == 0 || r.b.Streams[i].Share != 0 {
				t.Fatalf("a new subscriber told %v, holds %d: want a deny (the window is spent) and no share", toNew, r.b.Streams[i].Share)
			}
		})
	}
}
