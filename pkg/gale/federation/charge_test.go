package federation_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestFederatedChargesCountAtMostTheLimit runs check-then-charge streams
// (a check-only charge, then a charge of 1 to 20 units) on 2 regions of 2
// processes each, with escrows, until every check-only is refused, in
// several windows. What the federation counts — the units charged less
// the overrun dropped — is the limit exactly each window: spent, and
// never past it (the coordinator grants at most the limit, and a charge
// counts only what it leases).
func TestFederatedChargesCountAtMostTheLimit(t *testing.T) {
	const limit = 500
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: limit, Period: time.Minute}
	f := newFederatedFleet(t, memoryBackends(), fleetConfig{regions: 2, processes: 2, rule: rule, batch: 8, regionBatch: 40})
	start := storetest.Timeline()
	for win := range 4 {
		now := start.Add(time.Duration(win)*time.Minute + 3*time.Second)
		var charged, overrun, streams atomic.Int64
		var wg sync.WaitGroup
		for r := range f.regions {
			for p, l := range f.regions[r] {
				for c := range 3 {
					wg.Add(1)
					go func(l *gale.Limiter, rng *rand.Rand) {
						defer wg.Done()
						for {
							d, err := l.Charge(context.Background(), f.key, 0, now)
							if err != nil {
								t.Error(err)
								return
							}
							if !d.Allowed {
								return
							}
							streams.Add(1)
							n := 1 + rng.Int64N(20)
							d, err = l.Charge(context.Background(), f.key, n, now)
							if err != nil {
								t.Error(err)
								return
							}
							charged.Add(n)
							overrun.Add(d.Overrun)
						}
					}(l, rand.New(rand.NewPCG(uint64(win), uint64(r*100+p*10+c))))
				}
			}
		}
		wg.Wait()
		counted := charged.Load() - overrun.Load()
		t.Logf("window %d: %d streams, %d units charged, %d counted, %d dropped past the limit", win, streams.Load(), charged.Load(), counted, overrun.Load())
		if counted != limit {
			t.Fatalf("window %d: the federation counted %d, want the limit %d exactly", win, counted, limit)
		}
	}
}
