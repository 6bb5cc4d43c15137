package rlqs_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// BenchmarkReport is the report path of a subscribed stream, 8 streams on
// the bucket, the window assigned: 0 allocs/op.
func BenchmarkReport(b *testing.B) {
	r := newRig(b, rlqs.Machine{Limit: 1000, Window: 10 * time.Second})
	for s := rlqs.StreamID(1); s <= 8; s++ {
		r.report(t0.Add(time.Second), s, 0, 1, 0)
		r.report(t0.Add(5*time.Second), s, uint64(s)*10, 0, 5*time.Second)
	}
	r.tick(t0.Add(10 * time.Second))
	now := t0.Add(12 * time.Second)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		a, err := r.m.Report(&r.b, now, rlqs.StreamID(i%8+1), 40, 0, 5*time.Second)
		if err != nil || a.Lease.ID != 0 {
			b.Fatal(err, a)
		}
	}
}

// BenchmarkWindow is a window's lease landing and its split among 64 streams.
func BenchmarkWindow(b *testing.B) {
	m := rlqs.Machine{Limit: 1000, Window: 10 * time.Second}
	r := newRig(b, m)
	for s := rlqs.StreamID(1); s <= 64; s++ {
		r.report(t0.Add(time.Second), s, 0, 1, 0)
		r.report(t0.Add(5*time.Second), s, uint64(s), 0, 5*time.Second)
	}
	b.ReportAllocs()
	b.ResetTimer()
	end := t0.Add(10 * time.Second)
	for b.Loop() {
		a := m.Tick(&r.b, end)
		g := r.store.lease(a.Lease, end)
		m.Landed(&r.b, a.Lease.ID, end, end, g)
		end = end.Add(10 * time.Second)
	}
}
