package sizing_test

import (
	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
)

var sinkBatch int64

func BenchmarkLeaseSizerObserve(b *testing.B) {
	s, _ := sizing.NewLeaseSizer(sizing.Config{})
	d := stationary(1, 1024, 500, 0.5)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Observe(d[i&1023])
		i++
	}
}

func BenchmarkLeaseSizerBatch(b *testing.B) {
	s, _ := sizing.NewLeaseSizer(sizing.Config{})
	s.Observe(500)
	b.ReportAllocs()
	for b.Loop() {
		sinkBatch = s.Batch()
	}
}

func BenchmarkPredictiveSizerObserve(b *testing.B) {
	p, _ := sizing.NewPredictiveSizer(sizing.Config{}, 0)
	d := stationary(2, 1024, 500, 0.5)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Batch(d[(i+1)&1023]) // Observe scores the proposals of a Batch call
		p.Observe(d[i&1023])
		i++
	}
}

func BenchmarkPredictiveSizerBatch(b *testing.B) {
	p, _ := sizing.NewPredictiveSizer(sizing.Config{}, 0)
	p.Observe(500)
	b.ReportAllocs()
	for b.Loop() {
		sinkBatch = p.Batch(480)
	}
}

// TestZeroAllocs pins the benchmarks' 0 allocs/op in the ordinary test run.
func TestZeroAllocs(t *testing.T) {
	s, _ := sizing.NewLeaseSizer(sizing.Config{})
	p, _ := sizing.NewPredictiveSizer(sizing.Config{}, 0)
	for name, f := range map[string]func(){
		"LeaseSizer.Observe":            func() { s.Observe(500) },
		"LeaseSizer.Batch":              func() { sinkBatch = s.Batch() },
		"PredictiveSizer.Batch+Observe": func() { sinkBatch = p.Batch(480); p.Observe(500) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs, want 0", name, n)
		}
	}
}
