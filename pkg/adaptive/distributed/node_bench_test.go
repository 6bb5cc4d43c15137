package distributed_test

import (
	"context"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// benchNode is a node with a live grant of share, on a gate of limit local.
func benchNode(b *testing.B, share, local int, c distributed.NodeConfig) *distributed.Node {
	g := newTestGate(b, newKnob(local))
	c.Coordinator = shareScript(share)
	c.Fleet.LeaseTTL = 1000 * time.Hour
	c.Heartbeat = time.Hour
	n := newTestNode(b, g, c)
	if _, err := n.Beat(context.Background(), nodeT0); err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkNodeAcquireRelease is the uncontended admission path through
// the node: its lock, the share, the gate's lock, and the release.
func BenchmarkNodeAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name string
		c    distributed.NodeConfig
	}{
		{"plain", distributed.NodeConfig{}},
		{"eager+fence", distributed.NodeConfig{EagerDebounce: time.Millisecond, SelfFence: true, FenceMargin: time.Second}}, // the grant lasts 2s
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := benchNode(b, 100, 100, tc.c)
			done := nodeT0.Add(20 * time.Millisecond)
			b.ReportAllocs()
			for b.Loop() {
				l, ok := n.TryAcquire(nodeT0)
				if !ok {
					b.Fatal("refused")
				}
				l.Release(done, adaptive.OK)
			}
		})
	}
}

// BenchmarkNodeAcquireReleaseParallel is the same from GOMAXPROCS goroutines.
func BenchmarkNodeAcquireReleaseParallel(b *testing.B) {
	n := benchNode(b, 1<<20, 1<<20, distributed.NodeConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l, ok := n.TryAcquire(nodeT0); ok {
				l.Release(nodeT0.Add(time.Millisecond), adaptive.OK)
			}
		}
	})
}

// BenchmarkNodeReject is a request refused: by the share (with eager beats
// on, so the trigger is checked), and while fenced.
func BenchmarkNodeReject(b *testing.B) {
	b.Run("share", func(b *testing.B) {
		n := benchNode(b, 1, 100, distributed.NodeConfig{EagerDebounce: time.Millisecond})
		n.TryAcquire(nodeT0)
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := n.TryAcquire(nodeT0); ok {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		n := benchNode(b, 100, 100, distributed.NodeConfig{SelfFence: true, FenceMargin: time.Second})
		late := nodeT0.Add(time.Second) // the grant lasts 2s
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := n.TryAcquire(late); ok {
				b.Fatal("admitted")
			}
		}
	})
}

func TestNodeAdmissionAllocatesNothing(t *testing.T) {
	n := newTestNode(t, newTestGate(t, newKnob(4)), distributed.NodeConfig{Coordinator: shareScript(2), EagerDebounce: time.Millisecond})
	mustBeat(t, n, nodeT0)
	held, _ := n.TryAcquire(nodeT0)
	if a := testing.AllocsPerRun(100, func() {
		l, _ := n.TryAcquire(nodeT0)
		l.Release(nodeT0, adaptive.OK)
	}); a != 0 {
		t.Fatalf("%v allocations per admission and release", a)
	}
	n.TryAcquire(nodeT0) // at the share now
	if a := testing.AllocsPerRun(100, func() { n.TryAcquire(nodeT0) }); a != 0 {
		t.Fatalf("%v allocations per refusal", a)
	}
	held.Release(nodeT0, adaptive.OK)
}
