package distributed_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// recordingCoord passes each heartbeat to a Memory coordinator after
// sending its report on reports, and blocks the calls while hang is set.
type recordingCoord struct {
	*distributed.Memory
	reports chan distributed.Report
	hang    atomic.Pointer[chan struct{}]
}

func newRecording() *recordingCoord {
	return &recordingCoord{Memory: distributed.NewMemory(), reports: make(chan distributed.Report, 64)}
}

func (r *recordingCoord) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	r.reports <- rep
	if h := r.hang.Load(); h != nil {
		select {
		case <-*h:
		case <-ctx.Done():
			return distributed.Grant{}, ctx.Err()
		}
	}
	return r.Memory.Heartbeat(ctx, gate, rep, cfg, now)
}

// next waits for the next report.
func (r *recordingCoord) next(t *testing.T) distributed.Report {
	t.Helper()
	select {
	case rep := <-r.reports:
		return rep
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat")
	}
	panic("unreachable")
}

// none checks that no report is waiting.
func (r *recordingCoord) none(t *testing.T) {
	t.Helper()
	select {
	case rep := <-r.reports:
		t.Fatalf("unexpected heartbeat %+v", rep)
	default:
	}
}

// runNode starts n.Run until the test ends.
func runNode(t *testing.T, n *distributed.Node) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitRoundTrips waits until n has had k round trips.
func waitRoundTrips(t *testing.T, n *distributed.Node, clk *clock.Fake, k int64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("round trip %d", k), func() bool { return n.Stats(clk.Now()).RoundTrips >= k })
}

func TestRunBeatsEveryHeartbeat(t *testing.T) {
	clk := clock.NewFake(nodeT0)
	coord := newRecording()
	n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord, Clock: clk})
	runNode(t, n)
	for i := range 3 {
		if r := coord.next(t); r.Seq != uint64(i+1) {
			t.Fatalf("beat %d: seq %d", i, r.Seq)
		}
		waitRoundTrips(t, n, clk, int64(i+1))
		coord.none(t)
		clk.Advance(time.Second)
	}
	if s := n.Stats(clk.Now()); s.Mode != distributed.ModeGranted || s.Share != 10 || s.EagerBeats != 0 {
		t.Fatalf("%+v", s)
	}
}

// eagerFleet is two nodes of limit 10 on one gate: a, beating only when the
// test calls Beat, and b, under Run with eager beats debounced by 100ms.
func eagerFleet(t *testing.T, debounce time.Duration) (clk *clock.Fake, coord *recordingCoord, a, b *distributed.Node) {
	clk = clock.NewFake(nodeT0)
	coord = newRecording()
	a = newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "a", Coordinator: coord.Memory})
	b = newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "b", Coordinator: coord, Clock: clk, EagerDebounce: debounce})
	return clk, coord, a, b
}

// Trigger 1: b is refused by a share below its fair part of L_global while
// its local limit has room; debounced, its second off-cycle beat waits the
// debounce out.
func TestRunEagerWhenCappedBelowFairShare(t *testing.T) {
	clk, coord, a, b := eagerFleet(t, 100*time.Millisecond)
	mustBeat(t, a, nodeT0) // a alone: share 10
	held := admitAll(a, nodeT0)
	runNode(t, b)
	coord.next(t) // b joins: a still occupies 10, b gets 0
	waitRoundTrips(t, b, clk, 1)
	mustBeat(t, a, nodeT0) // a's share drops to 5, but it holds 10
	if s := b.Stats(nodeT0); s.Share != 0 || s.Global != 10 || s.Live != 2 {
		t.Fatalf("b: %+v, want share 0 of 10 between 2", s)
	}

	if _, ok := b.TryAcquire(nodeT0); ok {
		t.Fatal("b admitted under share 0")
	}
	coord.next(t) // at once: no time passed
	waitRoundTrips(t, b, clk, 2)
	if _, ok := b.TryAcquire(nodeT0); ok {
		t.Fatal("b admitted under share 0")
	}
	if err := clk.WaitForWaiters(nodeWaitCtx(t), 2); err != nil { // the ticker and the debounce timer
		t.Fatal(err)
	}
	coord.none(t)
	clk.Advance(99 * time.Millisecond)
	coord.none(t)
	clk.Advance(time.Millisecond)
	if r := coord.next(t); r.Seq != 3 {
		t.Fatalf("debounced beat: seq %d", r.Seq)
	}
	waitRoundTrips(t, b, clk, 3)
	if s := b.Stats(clk.Now()); s.EagerBeats != 2 {
		t.Fatalf("eager beats %d, want 2", s.EagerBeats)
	}

	for _, l := range held[5:] { // a drains to its share and says so: b gets its part
		l.Release(clk.Now(), adaptive.OK)
	}
	mustBeat(t, a, clk.Now())
	clk.Advance(time.Second) // b's regular beat
	coord.next(t)
	waitRoundTrips(t, b, clk, 4)
	if s := b.Stats(clk.Now()); s.Share != 5 {
		t.Fatalf("b's share %d, want 5", s.Share)
	}
}

// Trigger 3, then trigger 2: b, alone with share 10 and 10 in flight, is cut
// to 5 when a joins and beats at once (a changed share); after the
// debounce, it beats again the moment in flight drains to 5, and not
// before.
func TestRunEagerOnShareChangeAndDrain(t *testing.T) {
	clk, coord, a, b := eagerFleet(t, 100*time.Millisecond)
	runNode(t, b)
	coord.next(t)
	waitRoundTrips(t, b, clk, 1)
	held := admitAll(b, nodeT0)
	if len(held) != 10 {
		t.Fatalf("b admitted %d, want 10", len(held))
	}
	mustBeat(t, a, nodeT0) // a joins: share 0 while b occupies 10

	clk.Advance(time.Second)
	if r := coord.next(t); r.Inflight != 10 { // the regular beat: b's share drops to 5
		t.Fatalf("regular beat %+v", r)
	}
	if r := coord.next(t); r.Seq != 3 || r.Inflight != 10 { // eager: the share changed
		t.Fatalf("eager beat %+v", r)
	}
	waitRoundTrips(t, b, clk, 3)
	if s := b.Stats(clk.Now()); s.Share != 5 || s.EagerBeats != 1 {
		t.Fatalf("b: %+v, want share 5 after 1 eager beat", s)
	}

	clk.Advance(100 * time.Millisecond)
	for _, l := range held[:4] {
		l.Release(clk.Now(), adaptive.OK)
	}
	coord.none(t) // 6 still in flight, above the share
	held[4].Release(clk.Now(), adaptive.OK)
	if r := coord.next(t); r.Seq != 4 || r.Inflight != 5 {
		t.Fatalf("drain beat %+v, want seq 4 with 5 in flight", r)
	}
	waitRoundTrips(t, b, clk, 4)
	if s := b.Stats(clk.Now()); s.EagerBeats != 2 {
		t.Fatalf("eager beats %d, want 2", s.EagerBeats)
	}
}

// Without EagerDebounce the same triggers beat nothing off-cycle.
func TestRunNoEagerBeatsByDefault(t *testing.T) {
	clk, coord, a, b := eagerFleet(t, 0)
	mustBeat(t, a, nodeT0)
	admitAll(a, nodeT0)
	runNode(t, b)
	coord.next(t)
	waitRoundTrips(t, b, clk, 1)
	mustBeat(t, a, nodeT0)
	if _, ok := b.TryAcquire(nodeT0); ok {
		t.Fatal("admitted under share 0")
	}
	if err := clk.WaitForWaiters(nodeWaitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if r := coord.next(t); r.Seq != 2 {
		t.Fatalf("seq %d", r.Seq)
	}
	waitRoundTrips(t, b, clk, 2)
	if s := b.Stats(clk.Now()); s.EagerBeats != 0 || s.Refused != 1 {
		t.Fatalf("%+v", s)
	}
}

// A partition that hangs the call: Run still fences the node on time, with
// no traffic to notice it, and a beat that gets through unfences it.
func TestRunFencesWhileTheCallHangs(t *testing.T) {
	clk := clock.NewFake(nodeT0)
	coord := newRecording()
	fenced := make(chan time.Time, 4)
	n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{
		Coordinator: coord, Clock: clk, SelfFence: true, FenceMargin: 500 * time.Millisecond,
		OnFenced: func() { fenced <- clk.Now() },
	})
	runNode(t, n)
	coord.next(t)
	waitRoundTrips(t, n, clk, 1)
	if err := clk.WaitForWaiters(nodeWaitCtx(t), 2); err != nil { // the ticker and the fence timer
		t.Fatal(err)
	}
	release := make(chan struct{})
	coord.hang.Store(&release)
	clk.Advance(time.Second)
	coord.next(t) // hangs
	clk.Advance(500 * time.Millisecond)
	select {
	case at := <-fenced:
		if want := nodeT0.Add(1500 * time.Millisecond); !at.Equal(want) {
			t.Fatalf("fenced at t0+%v, want t0+1.5s", at.Sub(nodeT0))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not fenced")
	}
	if _, ok := n.TryAcquire(clk.Now()); ok {
		t.Fatal("admitted while fenced")
	}
	coord.hang.Store(nil)
	close(release)
	waitRoundTrips(t, n, clk, 2)
	if s := n.Stats(clk.Now()); s.Fenced || s.Fencings != 1 {
		t.Fatalf("after the call got through: %+v", s)
	}
	if len(fenced) != 0 {
		t.Fatal("OnFenced called twice in one episode")
	}
}

func nodeWaitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
