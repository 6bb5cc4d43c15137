package federation_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// perSecond is issue 28's rule: 10 per one-second window.
var perSecond = gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Second}

// TestEscrowDiesWithTheCoordinatorsWindow (issue 28, hole 1): everything on
// real servers and their own clocks, as serve runs them — each region's
// escrow on its Redis's TIME, the coordinator on its Redis's TIME, 100 ms
// of reply latency away. A process leases just before a window ends: the
// coordinator grants in that window, and the reply, with the surplus for
// the escrow, lands after it. Measured from the refill, the surplus lived
// on into the next window, where the region's other process took it while
// the other region was granted the new window's whole limit (19 in a
// window of 10). Measured from the take before the lease, it is dead on
// arrival, and the next window admits at most the limit.
func TestEscrowDiesWithTheCoordinatorsWindow(t *testing.T) {
	l3 := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, l3.Addr)
	coord, err := redisfed.NewCoordinator(newFastClientTimeout(t, proxy.Addr, 2*time.Second), redisstore.Options{ServerTime: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = coord.Close() })
	b := backends{escrow: func(t *testing.T, _ int) federation.Escrow {
		e, err := redisfed.NewEscrow(testenv.StartRedis(t).Client(), redisfed.EscrowOptions{ServerTime: true})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}}
	f := newFederatedFleet(t, b, fleetConfig{regions: 2, processes: 2, rule: perSecond, batch: 1, regionBatch: 10, coord: coord})
	f.check(0, 0, time.Now()) // warm: the connections exist before the latency
	proxy.Latency("downstream", 100*time.Millisecond)

	for attempt := 0; ; attempt++ {
		if attempt == 5 {
			t.Fatal("in five attempts no lease was sent before a window's end and answered after it: the machine is too slow for this schedule")
		}
		// Lease just before a boundary: the coordinator grants 10 in the
		// window ending at boundary, and the reply lands after it.
		boundary := time.Now().Truncate(time.Second).Add(2 * time.Second)
		<-time.After(time.Until(boundary.Add(-40 * time.Millisecond))) // a phase of the wall clock, not a settling wait
		sent := time.Now()
		if d := f.check(0, 0, sent); !d.Allowed {
			continue // the escrow or a denial answered: not the schedule
		}
		if !sent.Before(boundary) || time.Now().Before(boundary) {
			continue
		}
		// In the next window the region's other process and the other
		// region ask as much as they can.
		var wg sync.WaitGroup
		for _, rp := range [][2]int{{0, 1}, {1, 0}, {1, 1}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 15 {
					if now := time.Now(); now.Before(boundary.Add(900 * time.Millisecond)) {
						f.check(rp[0], rp[1], now)
					}
				}
			}()
		}
		wg.Wait()
		next := boundary.Add(time.Second)
		if got := f.in(next); got > perSecond.Limit {
			t.Fatalf("the window after the late reply admitted %d > the limit %d: the escrow's surplus outlived the coordinator's window (%s)", got, perSecond.Limit, regionStats(f))
		}
		t.Logf("attempt %d: the late reply's window admitted %d, the next %d (limit %d); %s", attempt, f.in(boundary), f.in(next), perSecond.Limit, regionStats(f))
		return
	}
}

// regionStats words what the fleet's regions did, for a failure message.
func regionStats(f *federatedFleet) string {
	var taken, refilled, expired int64
	for _, r := range f.stores {
		s := r.Stats()
		taken, refilled, expired = taken+s.EscrowTaken, refilled+s.Refilled, expired+s.ReconcileExpired
	}
	return fmt.Sprintf("escrow: %d taken, %d refilled; %d reconciles expired", taken, refilled, expired)
}

// newFastClientTimeout is newFastClient with read and write timeouts above
// a latency the test puts on the path.
func newFastClientTimeout(t *testing.T, addr string, timeout time.Duration) *redis.Client {
	// MinIdleConns: connections dialled before the test's latency, so that
	// no lease pays for a dial (and go-redis's HELLO) behind it.
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, MinIdleConns: 8})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
