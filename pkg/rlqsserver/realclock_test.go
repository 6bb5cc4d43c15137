package rlqsserver_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

// TestRealClockWindows: on the real clock, with the Redis store reading
// its own time (as serve runs it), two sidecars assign a 2 s window's
// limit window after window: the window timers fire, the store's window
// end maps to the sidecar's clock, and per window Σ assigned ≤ L and every
// assignment, as received, ends within the guard of its window's end.
func TestRealClockWindows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four 2 s windows")
	}
	const L, w = 20, 2 * time.Second
	policy := "domain: q\ndescriptors:\n  - key: tenant\n    rate_limit: {name: two-seconds, unit: second, unit_multiplier: 2, requests_per_unit: 20}\n"
	r := testenv.StartRedis(t)
	var envoys []*envoy
	for range 2 {
		rs, err := redisstore.New(r.Client(), redisstore.Options{ServerTime: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		sc := startSidecarWith(t, policy, rs, clock.Real{}, rlqsserver.Options{})
		e := connect(t, sc)
		e.report(false, usage{bucket: tenantA, allowed: 1})
		envoys = append(envoys, e)
	}
	type got struct {
		at  time.Time
		n   int64
		ttl time.Duration
	}
	var all []got
	deadline := time.Now().Add(4 * w)
	tick := time.NewTicker(500 * time.Millisecond) // Envoy's reports, faster: the windows are short
	defer tick.Stop()
	for time.Now().Before(deadline) {
		<-tick.C
		for _, e := range envoys {
			e.report(false, usage{bucket: tenantA, allowed: 5, elapsed: 500 * time.Millisecond})
			for _, a := range e.pending(tenantA) {
				n, ttl := assigned(t, a)
				if n == 0 {
					continue // DENY_ALL: no share of the window
				}
				all = append(all, got{time.Now(), n, ttl})
			}
		}
	}
	perWindow := map[int64]int64{}
	for _, g := range all {
		start := g.at.Truncate(w)
		end := start.Add(w)
		perWindow[start.UnixMilli()] += g.n
		if g.at.Add(g.ttl).After(end.Add(rlqs.DefaultGuard)) {
			t.Errorf("assignment of %d received at %v lives %v, past its window's end %v by more than the guard", g.n, g.at.Sub(start), g.ttl, end.Sub(start))
		}
	}
	for start, sum := range perWindow {
		t.Logf("window at %v: Σ %d of %d", time.UnixMilli(start).Format("15:04:05.000"), sum, L)
		if sum > L {
			t.Errorf("window at %v: Σ assigned %d > %d", time.UnixMilli(start), sum, L)
		}
	}
	if len(perWindow) < 2 {
		t.Errorf("assignments in %d windows of 4: the window timers did not fire", len(perWindow))
	}
}
