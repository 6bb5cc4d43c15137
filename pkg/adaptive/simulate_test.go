package adaptive

import (
	"slices"
	"testing"
	"time"
)

// The kata's simulation: a backend whose latency grows with its load,
// latency = 20ms + 0.5ms·inflight², offered 2000 requests/s, far more than
// it can take. A 100ms latency is reached at about 12.6 in flight. Every
// controller should find that region from a low start and not run away to
// MaxLimit (100); p95, which steers by exactly that target, should settle
// there without flapping. The others saw-tooth around it, as congestion
// control does: their feedback arrives one RTT late.
func TestSimulatedBackendConverges(t *testing.T) {
	for _, tc := range []struct {
		name           string
		meanLo, meanHi float64 // of the limit over the last 10s
		lo, hi         int     // its range over the last 10s
	}{
		{"p95", 12, 14, 12, 14},
		// gradient2 and vegas settle where their latency starts to rise,
		// below 100ms (at about 6 in flight, 38ms), dipping to a quarter
		// of their limit while they recalibrate (every 15s).
		{"gradient2", 4, 18, 1, 30},
		{"aimd", 4, 18, 1, 40},
		{"vegas", 4, 16, 1, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Controller
			for _, cc := range controllers {
				if cc.name == tc.name {
					c = cc.make(t, 1, 100, 2)
				}
			}
			settled := simulate(t, c)
			lo, hi, sum := slices.Min(settled), slices.Max(settled), 0
			for _, l := range settled {
				sum += l
			}
			mean := float64(sum) / float64(len(settled))
			t.Logf("last 10s: mean %.1f, range [%d, %d]", mean, lo, hi)
			if mean < tc.meanLo || mean > tc.meanHi || lo < tc.lo || hi > tc.hi {
				t.Fatalf("limit mean %.1f range [%d, %d], want mean in [%v, %v] and range within [%d, %d]: %v",
					mean, lo, hi, tc.meanLo, tc.meanHi, tc.lo, tc.hi, settled)
			}
		})
	}
}

// simulate runs 20s of the simulation, one step per millisecond, and returns
// the limit every 100ms of the last 10s.
func simulate(t *testing.T, c Controller) []int {
	g := newGate(t, GateConfig{Controller: c})
	type running struct {
		done  time.Time
		lease Lease
	}
	var inflight []running
	var limits []int
	for ms := range 20_000 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		kept := inflight[:0]
		for _, r := range inflight {
			if !r.done.After(now) {
				r.lease.Release(now, OK)
			} else {
				kept = append(kept, r)
			}
		}
		inflight = kept
		for range 2 {
			if l, ok := g.TryAcquire(now); ok {
				n := len(inflight) + 1
				latency := 20*time.Millisecond + time.Duration(n*n)*time.Millisecond/2
				inflight = append(inflight, running{now.Add(latency), l})
			}
		}
		if ms >= 10_000 && ms%100 == 0 {
			limits = append(limits, g.Snapshot().Limit)
		}
	}
	return limits
}
