package model

import (
	"fmt"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// Properties an instance must reach (TestRLQSBound checks some state has
// it), so that it explores what it is meant to.
var (
	// lateDelivery: an assignment still in flight a quantum after it was
	// sent.
	lateDelivery = func(c RLQSConfig, s RLQSState) bool {
		for _, e := range s.Envoys {
			if len(e.Inbox) > 0 && e.Inbox[0].Sent < s.Q {
				return true
			}
		}
		return false
	}
	// movedAfterDeath: an Envoy holds an assignment from the sidecar it did
	// not start on, after a death.
	movedAfterDeath = func(c RLQSConfig, s RLQSState) bool {
		for i, e := range s.Envoys {
			if s.Deaths > 0 && e.Has && e.Sidecar >= 0 && e.Sidecar != i%c.Sidecars {
				return true
			}
		}
		return false
	}
	// replacedLive: a reconnect's assignment replaced a live bucket.
	replacedLive = func(c RLQSConfig, s RLQSState) bool {
		for _, e := range s.Envoys {
			if e.Replaced {
				return true
			}
		}
		return false
	}
	// bothHold: every Envoy holds a live bucket at once (a split).
	bothHold = func(c RLQSConfig, s RLQSState) bool {
		for _, e := range s.Envoys {
			if !e.Has {
				return false
			}
		}
		return true
	}
	// starved: a subscribed Envoy holds nothing while the others hold all
	// of L (a mid-window subscriber gets only what is not assigned).
	starved = func(c RLQSConfig, s RLQSState) bool {
		held, idle := 0, false
		for _, e := range s.Envoys {
			if e.Has {
				held += e.Max
			}
			idle = idle || e.Subscribed && !e.Has
		}
		return idle && held == c.Limit
	}
	// sealed: an Envoy that held a token bucket in the window in place is
	// told DENY_ALL before the window ends (an assignment's seal).
	sealed = func(c RLQSConfig, s RLQSState) bool {
		for _, e := range s.Envoys {
			if e.Has && e.Max == 0 && e.Expiry > (s.Q/c.quantaPerWindow()+1)*c.quantaPerWindow() && s.Q%c.quantaPerWindow() != 0 {
				return true
			}
		}
		return false
	}
	// toppedUp: an Envoy that spent its assignment is sent a top-up, a
	// token bucket behind a DENY_ALL.
	toppedUp = func(c RLQSConfig, s RLQSState) bool {
		for _, e := range s.Envoys {
			for _, msg := range e.Inbox {
				if msg.Fresh && !msg.Deny {
					return true
				}
			}
		}
		return false
	}
	// resetInWindow: a stream reset while its Envoy held a live bucket.
	resetInWindow = func(c RLQSConfig, s RLQSState) bool {
		for _, e := range s.Envoys {
			if e.Sidecar < 0 && e.Has {
				return true
			}
		}
		return false
	}
)

// rlqsSpaces are the RLQS model's instances the bound is checked on, with
// their pinned counts (PROOFS.md, RLQS).
var rlqsSpaces = []struct {
	name                string
	cfg                 RLQSConfig
	reaches             func(RLQSConfig, RLQSState) bool
	states, transitions int
}{
	{"two Envoys, one sidecar, latency ≤ Guard", RLQSConfig{Envoys: 2, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4, MaxLatency: 1}, lateDelivery, 24421, 37641},
	{"two Envoys, one sidecar, a stream reset", RLQSConfig{Envoys: 2, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4, Resets: 1}, resetInWindow, 57288, 109298},
	{"two Envoys on two sidecars, a stream reset", RLQSConfig{Envoys: 2, Sidecars: 2, Limit: 1, WindowSeconds: 2, Windows: 2, ReportEvery: 4, Resets: 1}, resetInWindow, 146890, 337293},
	{"two Envoys, one sidecar, reports every second", RLQSConfig{Envoys: 2, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 2}, bothHold, 16846, 29763},
	{"three Envoys, one sidecar", RLQSConfig{Envoys: 3, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4}, starved, 54027, 108784},
	{"two Envoys on two sidecars, one dies", RLQSConfig{Envoys: 2, Sidecars: 2, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4, Deaths: 1}, movedAfterDeath, 95369, 243379},
	{"one Envoy reconnecting mid-window, older Envoy", RLQSConfig{Envoys: 1, Sidecars: 1, Limit: 3, WindowSeconds: 3, Windows: 2, ReportEvery: 2, Resets: 1}, replacedLive, 81654, 115334},
	{"one Envoy reconnecting mid-window, newer Envoy", RLQSConfig{Envoys: 1, Sidecars: 1, Limit: 3, WindowSeconds: 3, Windows: 2, ReportEvery: 2, Resets: 1, Ratio: true}, replacedLive, 79015, 111079},
	{"two Envoys, one sidecar, ALLOW_ALL, latency ≤ Guard", RLQSConfig{Envoys: 2, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4, MaxLatency: 1, AllowAll: true}, sealed, 104059, 204455},
	{"three Envoys, one sidecar, ALLOW_ALL", RLQSConfig{Envoys: 3, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4, AllowAll: true}, starved, 203206, 675465},
	{"two Envoys on two sidecars, ALLOW_ALL, three windows", RLQSConfig{Envoys: 2, Sidecars: 2, Limit: 1, WindowSeconds: 2, Windows: 3, ReportEvery: 4, AllowAll: true}, sealed, 356767, 1116332},
	{"one Envoy, three windows of 3 s, latency ≤ Guard, a reset", RLQSConfig{Envoys: 1, Sidecars: 1, Limit: 2, WindowSeconds: 3, Windows: 3, ReportEvery: 6, MaxLatency: 1, Resets: 1}, lateDelivery, 125709, 190942},
}

// TestRLQSBound explores the real assignment machine (pkg/rlqs) on each
// sidecar and Envoy's token buckets: in every state the window in place
// admits at most L (by the one clock the Envoys share with the store), and
// the store never leases more than L of it; some state admits exactly L
// (the bound is reached); and the instance reaches what it is for, and,
// where L ≥ 2, a top-up.
func TestRLQSBound(t *testing.T) {
	for _, tc := range rlqsSpaces {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			sp, err := ExploreRLQS(c, 1_000_000, nil)
			if err != nil {
				t.Fatal(err)
			}
			if path, s, found := sp.Find(c); found {
				t.Fatalf("a state breaks the bound: admitted %d, store %d (L %d):\n%s", s.Admitted, s.Used, c.Limit, rlqsWords(path))
			}
			if most := sp.MostAdmitted(); most != c.Limit {
				t.Fatalf("most admitted in a window %d, want L = %d reached", most, c.Limit)
			}
			if _, _, ok := sp.first(func(s RLQSState) bool { return tc.reaches(c, s) }); !ok {
				t.Fatal("the instance never reaches what it is meant to explore")
			}
			// Where L leaves room beside a first share (L ≥ 2), a top-up
			// is explored too.
			if _, _, ok := sp.first(func(s RLQSState) bool { return toppedUp(c, s) }); !ok && c.Limit >= 2 {
				t.Fatal("the instance never tops an Envoy up")
			}
			if sp.States() != tc.states || sp.Transitions() != tc.transitions {
				t.Errorf("%d states, %d transitions; pinned %d and %d (PROOFS.md): update both if the model changed on purpose", sp.States(), sp.Transitions(), tc.states, tc.transitions)
			}
			t.Logf("%d states, %d transitions, most admitted %d", sp.States(), sp.Transitions(), sp.MostAdmitted())
		})
	}
}

// TestRLQSLatencyPastGuard: delivery slower than the Guard breaks the
// bound of the real machine; the shortest trace is pinned in PROOFS.md.
func TestRLQSLatencyPastGuard(t *testing.T) {
	c := RLQSConfig{Envoys: 2, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4, MaxLatency: 2}
	checkRLQSFound(t, c, 13)
}

// TestRLQSFaultsAreFound: each defect the protocol guards against, put
// into the machine as a fault, is found by the explorer, with a shortest
// trace that replays and ends over the bound.
func TestRLQSFaultsAreFound(t *testing.T) {
	base := RLQSConfig{Envoys: 2, Sidecars: 1, Limit: 2, WindowSeconds: 2, Windows: 2, ReportEvery: 4}
	with := func(f rlqs.Fault, edit func(*RLQSConfig)) RLQSConfig {
		c := base
		c.Fault = f
		if edit != nil {
			edit(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name  string
		cfg   RLQSConfig
		steps int
	}{
		{"TTL rounded up, no Guard", with(rlqs.FaultCeilTTL, nil), 14},
		{"TTL without the Guard, latency ≤ Guard", with(rlqs.FaultNoGuard, func(c *RLQSConfig) { c.MaxLatency = 1 }), 14},
		{"a top-up charged only its increase", with(rlqs.FaultTopUpDifference, nil), 15},
		{"an equal resend on each report", with(rlqs.FaultRefreshTTL, func(c *RLQSConfig) { c.ReportEvery = 2 }), 13},
		{"a leaving Envoy's share given back", with(rlqs.FaultReassignOnLeave, func(c *RLQSConfig) { c.Resets = 1 }), 16},
		{"no DENY_ALL ahead of an expiry, ALLOW_ALL", with(rlqs.FaultNoSeal, func(c *RLQSConfig) { c.AllowAll = true }), 8},
		{"a leaving Envoy's share given back, two sidecars", with(rlqs.FaultReassignOnLeave, func(c *RLQSConfig) { c.Resets, c.Sidecars, c.Limit = 1, 2, 1 }), 9},
	} {
		t.Run(tc.name, func(t *testing.T) { checkRLQSFound(t, tc.cfg, tc.steps) })
	}
}

func checkRLQSFound(t *testing.T, c RLQSConfig, steps int) {
	t.Helper()
	sp, err := ExploreRLQS(c, 1_000_000, func(s RLQSState) bool { return !c.Holds(s) })
	if err != nil {
		t.Fatal(err)
	}
	path, s, found := sp.Find(c)
	if !found {
		t.Fatalf("not found in %d states", sp.States())
	}
	if err := c.replay(path, s); err != nil {
		t.Fatal(err)
	}
	if len(path) != steps {
		t.Errorf("found in %d steps, pinned %d (PROOFS.md)", len(path), steps)
	}
	t.Logf("found in %d steps, %d states: admitted %d of L %d:\n%s", len(path), sp.States(), s.Admitted, c.Limit, rlqsWords(path))
}

// replay runs path from the initial state and checks that it ends where
// the trace does.
func (c RLQSConfig) replay(path []RLQSStep, last RLQSState) error {
	cur, err := replay(c.Initial(), c.visit, path)
	if err != nil {
		return err
	}
	if c.Holds(cur) || c.key(cur) != c.key(last) {
		return fmt.Errorf("the replay ends admitting %d (holds %v), the trace %d", cur.Admitted, c.Holds(cur), last.Admitted)
	}
	return nil
}

func rlqsWords(path []RLQSStep) string {
	var b strings.Builder
	for _, s := range path {
		fmt.Fprintf(&b, "  %v\n", s)
	}
	return b.String()
}
