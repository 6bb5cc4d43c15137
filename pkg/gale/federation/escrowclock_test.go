package federation_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestEscrowDiesWithTheCoordinatorsWindow (issue 28, hole 1): each region's
// escrow on its own real Redis and the coordinator on another, each on a
// clock of its own read at every call (as ServerTime has them read their
// TIME): here one fake clock, which the test moves. A process leases 30 s
// before a window of 10 per minute ends: the coordinator grants in that
// window, and its reply is held until the clock is past the window's end
// (the reply's latency), so the surplus for the escrow lands in the next
// window. Measured from the refill, the surplus lived on into the next
// window, where the region's other process took it (9 checks), and then the
// other region was granted the new window's whole limit (19 in a window of
// 10). Measured from the take before the lease, it is dead on arrival, and
// the next window admits at most the limit. The hole, put back
// (FaultEscrowTTLFromRefill), shows on the same schedule: the test sees it.
func TestEscrowDiesWithTheCoordinatorsWindow(t *testing.T) {
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
	l3 := testenv.StartRedis(t)
	regions := []*testenv.Redis{testenv.StartRedis(t), testenv.StartRedis(t)}
	for _, tc := range []struct {
		name  string
		fault federation.RegionFault
	}{
		{"from the take", 0},
		{"from the refill", federation.FaultEscrowTTLFromRefill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The window ends at boundary on every clock; the lease goes out
			// 30 s before, and its reply lands 1 s after. The escrow's keys
			// expire in real time 30 s + max(30 s, EscrowGrace) after a
			// refill, so no balance of this test is dropped by Redis.
			boundary := storetest.Timeline().Add(rule.Period)
			sent, landed, next := boundary.Add(-30*time.Second), boundary.Add(time.Second), boundary.Add(2*time.Second)
			clk := clock.NewFake(sent)
			inner, err := redisfed.NewCoordinator(l3.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = inner.Close() })
			coord := &heldReply{Coordinator: inner, clock: clk, granted: make(chan gale.Grant, 1), release: make(chan struct{})}
			b := backends{escrow: func(t *testing.T, r int) federation.Escrow {
				e, err := redisfed.NewEscrow(regions[r].Client(), redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
				if err != nil {
					t.Fatal(err)
				}
				return clockedEscrow{Escrow: e, clock: clk}
			}}
			f := newFederatedFleet(t, b, fleetConfig{regions: 2, processes: 2, rule: rule, batch: 1, regionBatch: 10, coord: coord, fault: tc.fault})

			// Region 0's process 0 leases; the coordinator grants 10 in the
			// window ending at boundary, and the reply is held.
			coord.armed.Store(true)
			done := make(chan gale.Decision, 1)
			go func() { done <- f.check(0, 0, clk.Now()) }()
			var g gale.Grant
			select {
			case g = <-coord.granted:
			case d := <-done:
				t.Fatalf("the lease was answered without reaching the coordinator: %+v", d)
			case <-time.After(testenv.StoreDeadline):
				t.Fatalf("no lease reached the coordinator in %v", testenv.StoreDeadline)
			}
			if g.Granted != 10 || !g.WindowEnd.Equal(boundary) || !g.Now.Equal(sent) {
				t.Fatalf("the held lease was granted %+v, want 10 units at %v of the window ending %v", g, sent, boundary)
			}
			// The reply lands once the window is over on every clock.
			clk.Set(landed)
			close(coord.release)
			if d := <-done; !d.Allowed {
				t.Fatalf("the check whose reply came late: %+v, want it admitted (its unit is of the window it was granted in)", d)
			}

			// In the next window the region's other process asks for the
			// surplus's worth, one check at a time; then the other region's
			// processes ask as much as they can.
			clk.Set(next)
			for range g.Granted - 1 {
				f.check(0, 1, next)
			}
			var wg sync.WaitGroup
			for p := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 15 {
						f.check(1, p, next)
					}
				}()
			}
			wg.Wait()
			late, after := f.in(boundary), f.in(boundary.Add(rule.Period))
			t.Logf("the late reply's window admitted %d, the next %d (limit %d); %s", late, after, rule.Limit, regionStats(f))
			if late != 1 {
				t.Fatalf("the late reply's window admitted %d, want its 1", late)
			}
			switch {
			case tc.fault == 0 && after > rule.Limit:
				t.Fatalf("the window after the late reply admitted %d > the limit %d: the escrow's surplus outlived the coordinator's window (%s)", after, rule.Limit, regionStats(f))
			case tc.fault != 0 && after != 2*rule.Limit-1:
				t.Fatalf("with the escrow's life counted from the refill the window after the late reply admitted %d, want %d (the surplus %d, then the limit): the schedule no longer shows the hole (%s)",
					after, 2*rule.Limit-1, rule.Limit-1, regionStats(f))
			}
		})
	}
}

// heldReply is a coordinator on clock (read when a call arrives, as
// ServerTime reads Redis's TIME; the callers' now is ignored) whose first
// Lease once armed is granted and then held: the grant goes to granted, and
// the reply to its caller waits for release to close, or for the caller's
// context. A reply's latency, on a fake clock: the test moves the clock
// while the reply is on its way.
type heldReply struct {
	federation.Coordinator
	clock   clock.Clock
	armed   atomic.Bool
	granted chan gale.Grant // buffered: one
	release chan struct{}
}

func (c *heldReply) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, _ time.Time) (gale.Grant, error) {
	g, err := c.Coordinator.Lease(ctx, key, rule, lo, hi, c.clock.Now())
	if err != nil || !c.armed.CompareAndSwap(true, false) {
		return g, err
	}
	c.granted <- g
	select {
	case <-c.release:
		return g, nil
	case <-ctx.Done():
		return gale.Grant{}, ctx.Err()
	}
}

func (c *heldReply) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	rec.Now = c.clock.Now()
	return c.Coordinator.Reconcile(ctx, key, rule, rec)
}

// clockedEscrow is an escrow on clock, read at every call as ServerTime
// has a Redis escrow read its TIME; the now its callers pass is ignored.
type clockedEscrow struct {
	federation.Escrow
	clock clock.Clock
}

func (e clockedEscrow) Take(ctx context.Context, key string, lo, hi int64, _ time.Time) (federation.Held, error) {
	return e.Escrow.Take(ctx, key, lo, hi, e.clock.Now())
}

func (e clockedEscrow) Refill(ctx context.Context, key string, n int64, w federation.Window, _ time.Time) (int64, error) {
	return e.Escrow.Refill(ctx, key, n, w, e.clock.Now())
}

func (e clockedEscrow) Release(ctx context.Context, key string, end time.Time, _ time.Time) (int64, error) {
	return e.Escrow.Release(ctx, key, end, e.clock.Now())
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
