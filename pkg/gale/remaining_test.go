package gale_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// remainingNode is what the test knows of one leased node's figures.
type remainingNode struct {
	shown   int64 // the node's last Remaining in the span
	showing bool
	span    int64           // the window (start, µs) of shown; for a bucket, the store answer's step
	bound   int64           // the fleet's units left at the node's last store answer, less its own net admissions since
	took    []gale.Decision // its admissions of the window in place, not refunded
}

// TestLeasedRemainingMonotonic (issue 32, item 5): four leased nodes over
// real Redis, checks one at a time in a random order, with refunds and
// idle returns between them. Each node's Remaining never rises within a
// window (for a bucket, whose time is frozen here, between two store
// answers), is ≥ 0, and is at most what the fleet had left at the node's
// last store answer less the node's net admissions since. A refund used to
// raise the node's figure by its units, and a lease landing after another
// node gave credits back raised it by those.
func TestLeasedRemainingMonotonic(t *testing.T) {
	store, _ := newRedisStore(t)
	rules := []gale.Rule{
		{Algorithm: gale.FixedWindow, Limit: 30, Period: time.Minute},
		{Algorithm: gale.SlidingWindow, Limit: 30, Period: time.Minute},
		{Algorithm: gale.GCRA, Limit: 30, Period: time.Minute, Burst: 30},
		{Algorithm: gale.TokenBucket, Limit: 30, Period: time.Minute, Burst: 30},
	}
	for _, rule := range rules {
		t.Run(rule.Algorithm.String(), func(t *testing.T) {
			t0 := storetest.Timeline()
			key := fmt.Sprintf("remaining/%s/%d", t.Name(), time.Now().UnixNano())
			var nodes []*gale.Limiter
			for range 4 {
				nodes = append(nodes, newLimiter(t, store, gale.Config{
					Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 5, ReturnIdleAfter: time.Millisecond},
					Clock: clock.NewFake(t0),
				}))
			}
			state := make([]remainingNode, len(nodes))
			net := map[int64]int64{} // window start (µs) → admissions less refunds, fleet-wide
			rng := rand.New(rand.NewPCG(32, 5))
			windows := 3
			if !rule.Windowed() {
				windows = 1 // time frozen: the bucket never refills
			}
			var seen, rises int
			for w := range windows {
				for i := range 60 {
					now := t0.Add(time.Duration(w) * rule.Period)
					if rule.Windowed() {
						now = now.Add(time.Duration(i) * time.Millisecond)
					}
					ws, _ := rule.WindowBounds(now.UnixMicro())
					n := rng.IntN(len(nodes))
					switch r := rng.IntN(10); {
					case r == 0 && len(state[n].took) > 0:
						// Refund the node's admissions of the window in place
						// (its credits are of it): the requests were denied by
						// another limit.
						for _, d := range state[n].took {
							if err := nodes[n].Refund(context.Background(), key, 1, d, now); err != nil {
								t.Fatal(err)
							}
							state[n].bound++
							net[ws]--
						}
						state[n].took = nil
						continue
					case r == 1 && rule.Windowed():
						// Another node goes idle and gives its credits back.
						other := (n + 1) % len(nodes)
						nodes[other].ReturnIdle(context.Background(), now.Add(time.Millisecond))
						settle(t, nodes[other])
						// It forgot the key: its next figure starts afresh.
						state[other] = remainingNode{}
					}
					d, err := nodes[n].Check(context.Background(), key, 1, now)
					if err != nil {
						t.Fatal(err)
					}
					st := &state[n]
					if !d.WindowEnd.Equal(lastEnd(st.took)) {
						st.took = nil // credits of a new window: the old ones' refunds would be dropped
					}
					if !d.Allowed {
						continue
					}
					span := ws
					if !rule.Windowed() {
						span = st.span
						if d.Trips > 0 {
							span++
						}
					}
					if d.Trips > 0 {
						// A store answer: what the fleet had left before this
						// admission.
						st.bound = rule.Capacity() - net[ws]
					}
					net[ws]++
					st.bound--
					if d.Remaining < 0 || d.Remaining > st.bound {
						t.Errorf("window %d check %d node %d: remaining %d, want 0..%d (the fleet's left at the node's last store answer, less its admissions since)", w, i, n, d.Remaining, st.bound)
					}
					if st.showing && st.span == span && d.Remaining > st.shown {
						rises++
						t.Errorf("window %d check %d node %d: remaining rose from %d to %d", w, i, n, st.shown, d.Remaining)
					}
					st.shown, st.showing, st.span = d.Remaining, true, span
					st.took = append(st.took, d)
					seen++
				}
			}
			if seen < 30 {
				t.Fatalf("only %d admissions checked", seen)
			}
			t.Logf("%d admissions checked, %d rises", seen, rises)
		})
	}
}

// lastEnd is the window of the last decision of took, zero for none.
func lastEnd(took []gale.Decision) time.Time {
	if len(took) == 0 {
		return time.Time{}
	}
	return took[len(took)-1].WindowEnd
}
