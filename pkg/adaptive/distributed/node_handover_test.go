package distributed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// admitN admits k requests through n at now, failing t if one is refused.
func admitN(t *testing.T, n *distributed.Node, k int, now time.Time) []distributed.Lease {
	t.Helper()
	ls := make([]distributed.Lease, 0, k)
	for i := range k {
		l, ok := n.TryAcquire(now)
		if !ok {
			t.Fatalf("request %d of %d refused: %+v", i+1, k, n.Stats(now))
		}
		ls = append(ls, l)
	}
	return ls
}

func releaseAll(ls []distributed.Lease, now time.Time) {
	for _, l := range ls {
		l.Release(now, adaptive.OK)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A node rebuilt in the same process takes the old one over: it admits at
// once under the old grant, the old gate's requests counted, up to
// min(share, its own limit); it beats as the same instance (no duplicate
// nodeId) and reports the old requests until they end; the old node passes
// admissions and Stats on, beats no more, and its Leave leaves the record
// alone.
func TestNodeTakeOver(t *testing.T) {
	ctx := context.Background()
	coord := distributed.NewMemory()
	prev := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	mustBeat(t, prev, nodeT0)
	old := admitN(t, prev, 4, nodeT0)
	before := prev.Stats(nodeT0)

	next := newTestNode(t, newTestGate(t, newKnob(8)), distributed.NodeConfig{Coordinator: coord})
	if err := next.TakeOver(prev); err != nil {
		t.Fatal(err)
	}
	st := next.Stats(nodeT0)
	if st.Mode != distributed.ModeGranted || st.Ceiling != 8 || st.Inflight != 4 || st.Instance != before.Instance || st.AppliedGen != before.AppliedGen {
		t.Fatalf("the successor %+v, want granted under %+v's grant, ceiling min(10, 8), its 4 in flight", st, before)
	}
	if got := prev.Stats(nodeT0); got != st {
		t.Fatalf("the old node's Stats %+v, want its successor's %+v", got, st)
	}
	forwarded := admitN(t, prev, 1, nodeT0) // chosen under the old gate, admitted by the new
	fresh := admitN(t, next, 3, nodeT0)
	if _, ok := next.TryAcquire(nodeT0); ok {
		t.Fatalf("admitted past the ceiling: %+v", next.Stats(nodeT0))
	}
	if _, err := prev.Beat(ctx, nodeT0); !errors.Is(err, distributed.ErrLeft) {
		t.Fatalf("the old node's Beat: %v, want ErrLeft", err)
	}

	g := mustBeat(t, next, nodeT0.Add(time.Second))
	if g.Status != distributed.Granted || g.Gen != before.AppliedGen+1 {
		t.Fatalf("the successor's first beat: %+v, want granted, the record's next generation", g)
	}
	recs := coord.Records("checkout")
	if len(recs) != 1 || recs[0].Instance != st.Instance || recs[0].Inflight != 8 || recs[0].Local != 8 {
		t.Fatalf("records %+v, want one, the old instance's, with 8 in flight", recs)
	}
	if removed, err := prev.Leave(ctx); removed || err != nil {
		t.Fatalf("the old node's Leave: %v, %v; want nothing done", removed, err)
	}
	if len(coord.Records("checkout")) != 1 {
		t.Fatal("the old node's Leave removed its successor's record")
	}

	releaseAll(old, nodeT0)
	mustBeat(t, next, nodeT0.Add(2*time.Second))
	if recs := coord.Records("checkout"); recs[0].Inflight != 4 {
		t.Fatalf("records %+v once the old gate drained, want 4 in flight", recs)
	}
	releaseAll(append(forwarded, fresh...), nodeT0)
	if removed, err := next.Leave(ctx); !removed || err != nil {
		t.Fatalf("the successor's Leave: %v, %v", removed, err)
	}
}

// TakeOver refuses, changing nothing, what is not the same record in the
// same fleet, a successor already in use, and a node taken over already.
func TestNodeTakeOverRefused(t *testing.T) {
	coord, other := distributed.NewMemory(), distributed.NewMemory()
	prev := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	mustBeat(t, prev, nodeT0)
	for _, tc := range []struct {
		name string
		c    distributed.NodeConfig
		use  bool
	}{
		{"another node", distributed.NodeConfig{Node: "b", Coordinator: coord}, false},
		{"another gate", distributed.NodeConfig{Gate: "search", Coordinator: coord}, false},
		{"another coordinator", distributed.NodeConfig{Coordinator: other}, false},
		{"in use", distributed.NodeConfig{Coordinator: coord}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNode(t, newTestGate(t, newKnob(10)), tc.c)
			if tc.use {
				if _, err := n.Beat(context.Background(), nodeT0); !errors.Is(err, distributed.ErrDuplicateNode) {
					t.Fatalf("Beat: %v", err)
				}
			}
			if err := n.TakeOver(prev); !errors.Is(err, distributed.ErrNotSuccessor) {
				t.Fatalf("TakeOver: %v, want ErrNotSuccessor", err)
			}
			if st := prev.Stats(nodeT0); st.Mode != distributed.ModeGranted || st.Node != "a" {
				t.Fatalf("a refused TakeOver changed the old node: %+v", st)
			}
		})
	}
	next := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	if err := next.TakeOver(prev); err != nil {
		t.Fatal(err)
	}
	again := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	if err := again.TakeOver(prev); !errors.Is(err, distributed.ErrNotSuccessor) {
		t.Fatalf("a second TakeOver: %v, want ErrNotSuccessor", err)
	}
}

// A draining node admits nothing and beats on, reserving its requests in
// flight; Drain's channel closes when the last ends, and the node then
// leaves. With none in flight it closes at once; a node taken over while
// draining closes it too, its requests now the successor's.
func TestNodeDrain(t *testing.T) {
	ctx := context.Background()
	coord := distributed.NewMemory()
	n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	mustBeat(t, n, nodeT0)
	held := admitN(t, n, 2, nodeT0)
	drained := n.Drain()
	if isClosed(drained) {
		t.Fatal("Drain's channel closed with 2 in flight")
	}
	if _, ok := n.TryAcquire(nodeT0); ok {
		t.Fatal("a draining node admitted")
	}
	if st := n.Stats(nodeT0); st.Mode != distributed.ModeDraining || st.Ceiling != 0 {
		t.Fatalf("draining: %+v", st)
	}
	mustBeat(t, n, nodeT0.Add(time.Second))
	if recs := coord.Records("checkout"); len(recs) != 1 || recs[0].Inflight != 2 {
		t.Fatalf("records %+v, want the draining node's 2 in flight", recs)
	}
	held[0].Release(nodeT0, adaptive.OK)
	if isClosed(drained) {
		t.Fatal("Drain's channel closed with 1 in flight")
	}
	held[1].Release(nodeT0, adaptive.OK)
	if !isClosed(drained) || n.Drain() != drained {
		t.Fatal("Drain's channel not closed once nothing is in flight, or not the same channel")
	}
	if removed, err := n.Leave(ctx); !removed || err != nil {
		t.Fatalf("Leave: %v, %v", removed, err)
	}

	idle := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	mustBeat(t, idle, nodeT0)
	if !isClosed(idle.Drain()) {
		t.Fatal("Drain's channel not closed at once with nothing in flight")
	}
	if removed, err := idle.Leave(ctx); !removed || err != nil {
		t.Fatalf("Leave: %v, %v", removed, err)
	}

	busy := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "b", Coordinator: coord})
	mustBeat(t, busy, nodeT0)
	held = admitN(t, busy, 1, nodeT0)
	drained = busy.Drain()
	next := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "b", Coordinator: coord})
	if err := next.TakeOver(busy); err != nil {
		t.Fatal(err)
	}
	if !isClosed(drained) {
		t.Fatal("Drain's channel not closed once the node was taken over")
	}
	if st := next.Stats(nodeT0); st.Mode != distributed.ModeGranted || st.Inflight != 1 {
		t.Fatalf("the successor of a draining node: %+v, want granted with its 1 in flight", st)
	}
	held[0].Release(nodeT0, adaptive.OK)
}
