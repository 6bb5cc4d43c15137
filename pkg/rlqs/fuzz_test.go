package rlqs_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// FuzzMachine drives one bucket through event sequences read from the
// input — reports (subscriptions included), leaves, ticks, leases landing
// late or failing, time going backwards — over a windowStore, and checks
// the invariants after every event: it never panics; at most one lease is
// in flight; Sent + Returned ≤ Leased, Leased − Returned ≤ L in a window; every assignment
// has TTL ≥ 1 s, tokens_per_fill 1, a fill interval ≥ 2 windows, and ends
// (sent + TTL + Guard) by its window's end; no stream is sent two in one
// window; Σ max_tokens sent per store window ≤ L.
func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 3, 10, 1, 1, 4, 50, 2, 0, 5, 0})
	f.Add([]byte{0, 1, 0, 2, 0, 3, 4, 200, 3, 1, 4, 200, 1, 2, 5, 1, 6, 0})
	f.Add([]byte{0, 1, 3, 0, 4, 255, 4, 255, 0, 1, 2, 1, 5, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		m := rlqs.Machine{Limit: 20, Window: 3 * time.Second, Guard: 300 * time.Millisecond, MaxStreams: 6}
		if len(ops) > 0 && ops[0]&1 == 1 {
			m.Limit = 1
		}
		r := newRig(t, m)
		r.hold = true
		now := t0
		perWindow := map[time.Time]int64{}
		perStream := map[[2]int64]bool{}
		seen := 0
		// A stream that left is gone: its slot's next stream is a new one
		// (the driver never reuses a StreamID).
		var gen [5]rlqs.StreamID
		for i := 0; i+1 < len(ops); i += 2 {
			op, x := ops[i]%7, ops[i+1]
			s := gen[x%5]*5 + rlqs.StreamID(x%5)
			switch op {
			case 0: // report
				a, err := r.m.Report(&r.b, now, s, uint64(x/5), uint64(x%3), time.Duration(x%4)*time.Second)
				if err == nil {
					r.do(now, a)
				}
			case 1:
				r.leave(now, s)
				gen[x%5]++
			case 2:
				r.tick(now)
			case 3: // land the oldest lease
				if len(r.pending) > 0 {
					r.land(now)
				}
			case 4: // time passes
				now = now.Add(time.Duration(x) * 20 * time.Millisecond)
			case 5: // a lease fails
				if len(r.pending) > 0 {
					p := r.pending[0]
					r.pending = r.pending[1:]
					r.do(now, r.m.Failed(&r.b, p.ask.ID, now))
				}
			case 6: // a report stamped in the past
				a, err := r.m.Report(&r.b, now.Add(-time.Duration(x)*time.Millisecond), s, 1, 0, time.Second)
				if err == nil {
					r.do(now, a)
				}
			}
			if len(r.pending) > 1 {
				t.Fatalf("%d leases in flight", len(r.pending))
			}
			b := &r.b
			if b.Sent < 0 || b.Returned < 0 || b.Sent+b.Returned > b.Leased || b.Leased-b.Returned > m.Limit {
				t.Fatalf("leased %d sent %d returned %d of L %d", b.Leased, b.Sent, b.Returned, m.Limit)
			}
			for _, a := range r.sent[seen:] {
				if a.TTL < time.Second || a.TTL%time.Second != 0 || a.TokensPerFill != 1 || a.FillInterval < 2*m.Window || a.FillInterval%time.Second != 0 || a.MaxTokens < 1 {
					t.Fatalf("bad assignment %+v", a)
				}
				if a.at.Add(a.TTL + m.Guard).After(a.until) {
					t.Fatalf("%v outlives its window ending %v", a, a.until.Sub(t0))
				}
				k := [2]int64{int64(a.Stream), a.until.UnixNano()}
				if perStream[k] {
					t.Fatalf("stream %d sent two assignments in the window ending %v", a.Stream, a.until.Sub(t0))
				}
				perStream[k] = true
				perWindow[a.until] += a.MaxTokens
				if perWindow[a.until] > m.Limit {
					t.Fatalf("window ending %v: %d sent > L %d", a.until.Sub(t0), perWindow[a.until], m.Limit)
				}
			}
			for _, d := range r.denied {
				if d.TTL < time.Second || d.TTL%time.Second != 0 || d.MaxTokens != 0 {
					t.Fatalf("bad deny %+v", d)
				}
			}
			seen = len(r.sent)
		}
	})
}
