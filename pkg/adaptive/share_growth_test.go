package adaptive

import (
	"testing"
	"time"
)

// In congestion avoidance a saturated gate grows one step per round trip.
// A distributed node admits under a share of L_global/N: a round trip
// brings it the share's worth of answers, not its limit's, and spreading
// the step over its limit grew it — and the fleet's mean with it — N times
// slower than one sidecar (four coordinated gradient2 sidecars reached
// 0.83× one sidecar's goodput in make bench-gate). One round trip of a
// full share of 10 under a limit of 40 must grow the limit by one step,
// for the integer law (aimd, vegas) and the continuous one (gradient2);
// without a ceiling, a round trip is the limit's worth of answers.
func TestCongestionAvoidanceUnderAShare(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name             string
		ceiling, answers int
	}{
		{"a share of 10, its round trip", 10, 10},
		{"no share, the limit's round trip", 0, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const limit = 40
			s := Sample{Start: now, RTT: 50 * time.Millisecond, Inflight: limit, Limit: limit, Ceiling: tc.ceiling, Outcome: OK}
			p := pacing{initial: 10, threshold: 20} // after a cut, above it: congestion avoidance
			l := limit
			for i := range tc.answers {
				if l = p.grow(now, s, l, 1); l != limit && i < tc.answers-1 {
					t.Fatalf("grow: %d after %d answers of %d, want %d until the round trip ends", l, i+1, tc.answers, limit)
				}
			}
			if l != limit+1 {
				t.Fatalf("grow: %d after a round trip (%d answers), want %d", l, tc.answers, limit+1)
			}
			pf, f := pacing{initial: 10, threshold: 20}, float64(limit)
			for range tc.answers {
				f = pf.growF(now, s, f, f+10)
			}
			if f < limit+0.95 || f > limit+1.001 { // 1/cur per answer, cur rising: just under a step
				t.Fatalf("growF: %.3f after a round trip (%d answers), want %d", f, tc.answers, limit+1)
			}
		})
	}
}

// Start-up never rises more than a round trip's rise past the most in
// flight ever answered. A distributed node's Inflight is scaled to its own
// limit — at a full share it reads as the limit, whatever the backend
// carried — so the bound must be the backend's load (Sample.Load): a node
// at 40 whose full share of 10 says the fleet carried 10 has proven 10,
// and does not grow; without Load it rises to 71 in one round trip.
func TestStartUpUnderAShareIsBoundByTheBackendsLoad(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name string
		load int
		want int // the limit after a round trip (10 answers) at 40
	}{
		{"the fleet carried 10", 10, 40},
		{"not a node's: the scaled in flight, doubling", 0, 71},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pacing{initial: 10}
			s := Sample{Start: now, RTT: 50 * time.Millisecond, Inflight: 40, Limit: 40, Ceiling: 10, Load: tc.load, Outcome: OK}
			l := 40
			for range 10 {
				l = p.grow(now, s, l, 1)
			}
			if l != tc.want {
				t.Fatalf("start-up at 40 after a round trip: %d, want %d", l, tc.want)
			}
		})
	}
}
