package adaptive

import (
	"context"
	"testing"
	"time"
)

// BenchmarkGateAcquireRelease is the uncontended fast path: TryAcquire and
// Release with AIMD, the cheapest controller.
func BenchmarkGateAcquireRelease(b *testing.B) {
	g := newGate(b, GateConfig{Controller: must(NewAIMD(AIMDConfig{MaxLimit: 1000, InitialLimit: 100}))})
	now, done := t0, t0.Add(20*time.Millisecond)
	b.ReportAllocs()
	for b.Loop() {
		l, ok := g.TryAcquire(now)
		if !ok {
			b.Fatal("rejected")
		}
		l.Release(done, OK)
	}
}

// BenchmarkGateAcquireReleaseParallel is the same under contention from
// GOMAXPROCS goroutines.
func BenchmarkGateAcquireReleaseParallel(b *testing.B) {
	g := newGate(b, GateConfig{Controller: must(NewAIMD(AIMDConfig{MaxLimit: 1 << 20, InitialLimit: 1 << 20}))})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l, ok := g.TryAcquire(t0); ok {
				l.Release(t0.Add(time.Millisecond), OK)
			}
		}
	})
}

// BenchmarkGateReject is a request refused at the limit, by TryAcquire and
// by Acquire without a queue, and by Acquire followed by Limit, as ext_proc
// does to report the limit with the 503.
func BenchmarkGateReject(b *testing.B) {
	g := newGate(b, GateConfig{Controller: &scripted{limit: 1}})
	g.TryAcquire(t0)
	b.Run("TryAcquire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := g.TryAcquire(t0); ok {
				b.Fatal("admitted")
			}
		}
	})
	b.Run("Acquire", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Acquire(ctx, t0); err != ErrLimit {
				b.Fatal(err)
			}
		}
	})
	b.Run("AcquireLimit", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Acquire(ctx, t0); err != ErrLimit || g.Limit() != 1 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkObserve is one sample through each controller, with RTTs that
// keep it moving (fast, slow and failed samples in turn).
func BenchmarkObserve(b *testing.B) {
	rtts := []time.Duration{40e6, 45e6, 120e6, 41e6, 300e6, 42e6, 39e6}
	outcomes := []Outcome{OK, OK, OK, OK, OK, OK, Error}
	for _, tc := range controllers {
		b.Run(tc.name, func(b *testing.B) {
			c := tc.make(b, 1, 1000, 100)
			now, i := t0, 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				c.Observe(now, Sample{Start: now, RTT: rtts[i%len(rtts)], Inflight: c.Limit(), Outcome: outcomes[i%len(outcomes)]})
				i++
			}
		})
	}
}

func BenchmarkSnapshot(b *testing.B) {
	g := newGate(b, GateConfig{Controller: &scripted{limit: 10}})
	for i := range DefaultStatsWindow {
		l, _ := g.TryAcquire(t0)
		l.Release(t0.Add(time.Duration(i)*time.Microsecond), OK)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.Snapshot()
	}
}
