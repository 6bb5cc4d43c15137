package federation_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// deadlineCoordinator records, for each Lease, Reconcile and Healthy that
// reaches its coordinator, when it arrived, the deadline its context carried
// and the error it ended with: what a test judges a timeout by, instead of
// the wall clock. While cut is set — the test holds the coordinator's
// replies at a proxy, or has killed it — each call is first bounded by cut
// from when it arrived: the deadline a held call ends at, the region's
// process's own when the coordinator answers (a loaded machine's round
// trip does not time out then).
type deadlineCoordinator struct {
	federation.Coordinator
	cut   atomic.Int64 // a time.Duration; 0: the caller's deadline alone
	mu    sync.Mutex
	calls []coordCall
}

// coordCall is one call that reached a deadlineCoordinator.
type coordCall struct {
	op       string    // "lease", "reconcile" or "healthy"
	arrived  time.Time // when it reached the coordinator (monotonic)
	deadline time.Time // its context's deadline; zero when it had none
	err      error
}

// endedAtDeadline reports whether c ended at its deadline: the context's
// error, or a read whose deadline the context set.
func (c coordCall) endedAtDeadline() bool {
	return errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, os.ErrDeadlineExceeded)
}

func (c coordCall) String() string {
	if c.deadline.IsZero() {
		return fmt.Sprintf("%s with no deadline, ended with %v", c.op, c.err)
	}
	return fmt.Sprintf("%s with a deadline %v after it arrived, ended with %v", c.op, c.deadline.Sub(c.arrived), c.err)
}

// cutFor bounds each call from now on by d from when it arrives; 0 lifts it.
func (c *deadlineCoordinator) cutFor(d time.Duration) { c.cut.Store(int64(d)) }

func (c *deadlineCoordinator) begin(ctx context.Context) (context.Context, context.CancelFunc, time.Time) {
	arrived := time.Now()
	if cut := time.Duration(c.cut.Load()); cut > 0 {
		ctx, cancel := context.WithDeadline(ctx, arrived.Add(cut))
		return ctx, cancel, arrived
	}
	return ctx, func() {}, arrived
}

func (c *deadlineCoordinator) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	ctx, cancel, arrived := c.begin(ctx)
	defer cancel()
	g, err := c.Coordinator.Lease(ctx, key, rule, lo, hi, now)
	c.record(ctx, "lease", arrived, err)
	return g, err
}

func (c *deadlineCoordinator) Reconcile(ctx context.Context, key string, rule gale.Rule, rec federation.Reconcile) (federation.Reconciled, error) {
	ctx, cancel, arrived := c.begin(ctx)
	defer cancel()
	got, err := c.Coordinator.Reconcile(ctx, key, rule, rec)
	c.record(ctx, "reconcile", arrived, err)
	return got, err
}

func (c *deadlineCoordinator) Healthy(ctx context.Context) error {
	ctx, cancel, arrived := c.begin(ctx)
	defer cancel()
	err := c.Coordinator.Healthy(ctx)
	c.record(ctx, "healthy", arrived, err)
	return err
}

func (c *deadlineCoordinator) record(ctx context.Context, op string, arrived time.Time, err error) {
	deadline, _ := ctx.Deadline()
	c.mu.Lock()
	c.calls = append(c.calls, coordCall{op: op, arrived: arrived, deadline: deadline, err: err})
	c.mu.Unlock()
}

// take returns the calls recorded since the last take.
func (c *deadlineCoordinator) take() []coordCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := c.calls
	c.calls = nil
	return calls
}

// cutTimeout bounds a call to a coordinator the test has cut off
// (deadlineCoordinator.cutFor). A call the partition holds ends only at
// it, however loaded the machine: short, so that the test stays quick.
const cutTimeout = 100 * time.Millisecond

// judgeCut checks the calls that reached the coordinator while the test had
// cut it off: there were some, and every one failed; held (a proxy holding
// the replies), every one ended at its deadline, the only thing that could
// end it.
func judgeCut(t *testing.T, calls []coordCall, held bool) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatal("no call reached the coordinator while it was cut off")
	}
	for _, c := range calls {
		switch {
		case c.err == nil:
			t.Fatalf("%v: it succeeded with the coordinator cut off", c)
		case c.deadline.IsZero():
			t.Fatalf("%v: it had no deadline", c)
		case held && !c.endedAtDeadline():
			t.Fatalf("%v: a call whose reply was held ended before its deadline", c)
		}
	}
}
