package federation_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestFederatedRemaining (issue 32, item 5): one process of one region,
// limit 30/min, an escrow, sequential requests. Its Remaining was the
// escrow's balance whenever a lease took from the escrow (25, 3, 2, 1, 0,
// 20, 3, …, every one admitted): it now counts what the coordinator had
// left at the process's last answer too, so that with one process the
// figure is exactly what the window has left, and never rises in it.
func TestFederatedRemaining(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    func(t *testing.T) backends
	}{
		{"memory", func(*testing.T) backends { return memoryBackends() }},
		{"redis", func(t *testing.T) backends { return realRegions(t, redisCoordinator(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 30, Period: time.Minute}
			f := newFederatedFleet(t, tc.b(t), fleetConfig{regions: 1, processes: 1, rule: rule, batch: 3, regionBatch: 10})
			t0 := storetest.Timeline()
			for w := range 2 {
				var seq []int64
				admitted := int64(0)
				for i := range 35 {
					now := t0.Add(time.Duration(w)*time.Minute + time.Duration(i)*time.Millisecond)
					d := f.check(0, 0, now)
					if !d.Allowed {
						continue
					}
					admitted++
					seq = append(seq, d.Remaining)
					if want := rule.Limit - admitted; d.Remaining != want {
						t.Errorf("window %d, admission %d: remaining %d, want %d (30 less the %d admitted: one process, the figure is exact)", w, admitted, d.Remaining, want, admitted)
					}
					if n := len(seq); n > 1 && seq[n-1] > seq[n-2] {
						t.Errorf("window %d, admission %d: remaining rose from %d to %d", w, admitted, seq[n-2], seq[n-1])
					}
				}
				if admitted != rule.Limit {
					t.Errorf("window %d admitted %d, want %d", w, admitted, rule.Limit)
				}
				t.Logf("window %d: remaining %v", w, seq)
			}
		})
	}
}
