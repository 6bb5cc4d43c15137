package adaptive

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestGateTryAcquireBelow(t *testing.T) {
	for _, tc := range []struct {
		name            string
		limit, ceiling  int
		held, wantAdmit int // held before; how many more it admits
	}{
		{"ceiling below limit binds", 5, 2, 0, 2},
		{"limit below ceiling binds", 2, 5, 0, 2},
		{"equal", 3, 3, 1, 2},
		{"zero ceiling admits nothing", 5, 0, 0, 0},
		{"negative ceiling admits nothing", 5, -1, 0, 0},
		{"ceiling lowered under inflight admits nothing", 5, 2, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate(t, GateConfig{Controller: &scripted{limit: tc.limit}})
			for range tc.held {
				if _, ok := g.TryAcquire(t0); !ok {
					t.Fatal("setup: rejected")
				}
			}
			admitted := 0
			for range tc.limit + 2 {
				if _, ok := g.TryAcquireBelow(t0, tc.ceiling); ok {
					admitted++
				}
			}
			if admitted != tc.wantAdmit {
				t.Fatalf("admitted %d, want %d", admitted, tc.wantAdmit)
			}
			if got, want := g.Inflight(), tc.held+tc.wantAdmit; got != want || g.Snapshot().Inflight != want {
				t.Fatalf("Inflight %d, Snapshot %d, want %d", got, g.Snapshot().Inflight, want)
			}
			if s := g.Snapshot(); s.Rejected != int64(tc.limit+2-tc.wantAdmit) {
				t.Fatalf("Rejected %d, want %d", s.Rejected, tc.limit+2-tc.wantAdmit)
			}
		})
	}
}

// stepper is a Controller that moves its limit on every Observe, cycling
// through [1, max]: the worst case for a check made outside the gate's lock.
type stepper struct{ limit, max int }

func (s *stepper) Observe(time.Time, Sample) int {
	s.limit = s.limit%s.max + 1
	return s.limit
}
func (s *stepper) Limit() int   { return s.limit }
func (s *stepper) Name() string { return "stepper" }

// While Releases move the limit on every call, admissions under a ceiling
// never take inflight above it, and every lease is released exactly once.
func TestGateTryAcquireBelowHammer(t *testing.T) {
	g := newGate(t, GateConfig{Controller: &stepper{limit: 4, max: 8}})
	const ceiling = 5
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				l, ok := g.TryAcquireBelow(t0, ceiling)
				if !ok {
					continue
				}
				c := g.snapshotCore()
				if c.inflight > ceiling {
					t.Errorf("worker %d: inflight %d above ceiling %d", w, c.inflight, ceiling)
				}
				if i%3 == 0 {
					l.Release(t0, OK) // a copy's second release below is a no-op
				}
				l.Release(t0.Add(time.Millisecond), OK)
			}
		})
	}
	wg.Wait()
	if n := g.Inflight(); n != 0 {
		t.Fatalf("inflight %d after every lease was released", n)
	}
}

func TestGateTryAcquireBelowAllocatesNothing(t *testing.T) {
	g := newGate(t, GateConfig{Controller: &scripted{limit: 4}})
	l, _ := g.TryAcquireBelow(t0, 1)
	if n := testing.AllocsPerRun(100, func() { g.TryAcquireBelow(t0, 1) }); n != 0 {
		t.Fatalf("%v allocations per rejection", n)
	}
	l.Release(t0, OK)
	if n := testing.AllocsPerRun(100, func() {
		l, _ := g.TryAcquireBelow(t0, 1)
		l.Release(t0, OK)
	}); n != 0 {
		t.Fatalf("%v allocations per admission and release", n)
	}
	if n := testing.AllocsPerRun(100, func() { g.Inflight() }); n != 0 {
		t.Fatalf("%v allocations per Inflight", n)
	}
}

// recorder is a Controller with a fixed limit that keeps every sample.
type recorder struct {
	limit   int
	samples []Sample
}

func (r *recorder) Observe(_ time.Time, s Sample) int {
	r.samples = append(r.samples, s)
	return r.limit
}
func (r *recorder) Limit() int   { return r.limit }
func (r *recorder) Name() string { return "recorder" }

// An admission under a ceiling below the limit reports its in flight as a
// fraction of that ceiling, scaled to the limit: a node of a fleet whose
// share is a quarter of L_local is fully used at a quarter of it, and its
// controller's utilization guard must see that, or L_local could never
// grow past where it started (the fleet's backend load is the fleet's, not
// the node's).
func TestGateTryAcquireBelowScalesUtilization(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit, ceiling int
		want           []int // samples' Inflight, in admission order
	}{
		{"quarter share", 8, 2, []int{4, 8}},
		{"share of three", 10, 3, []int{4, 7, 10}}, // ⌈1·10/3⌉, ⌈2·10/3⌉, 10
		{"ceiling above limit", 2, 5, []int{1, 2}},
		{"ceiling at limit", 3, 3, []int{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{limit: tc.limit}
			g := newGate(t, GateConfig{Controller: rec})
			var leases []Lease
			for range len(tc.want) {
				l, ok := g.TryAcquireBelow(t0, tc.ceiling)
				if !ok {
					t.Fatal("rejected")
				}
				leases = append(leases, l)
			}
			for _, l := range leases {
				l.Release(t0.Add(time.Millisecond), OK)
			}
			var got []int
			for _, s := range rec.samples {
				got = append(got, s.Inflight)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("samples' Inflight %v, want %v", got, tc.want)
			}
		})
	}
}

// Under a share of 10 of a fleet's 20, a node whose limit is 40 reports
// its in flight scaled to its limit (Inflight, for cuts) and to the fleet
// (Load, for the growth check): at its full share, 40 and 20.
func TestGateTryAcquireShareReportsTheFleetsLoad(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		limit, share, fleet             int
		wantInflight, wantLoad, wantCei []int
	}{
		{"share below limit", 40, 4, 20, []int{10, 20, 30, 40}, []int{5, 10, 15, 20}, []int{4, 4, 4, 4}},
		{"fleet unknown", 40, 4, 0, []int{10, 20, 30, 40}, []int{0, 0, 0, 0}, []int{4, 4, 4, 4}},
		{"limit binds: its own count", 3, 4, 20, []int{1, 2, 3}, []int{0, 0, 0}, []int{0, 0, 0}},
		{"rounded up", 10, 3, 7, []int{4, 7, 10}, []int{3, 5, 7}, []int{3, 3, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{limit: tc.limit}
			g := newGate(t, GateConfig{Controller: r})
			var held []Lease
			for {
				l, ok := g.TryAcquireShare(t0, tc.share, tc.fleet)
				if !ok {
					break
				}
				held = append(held, l)
			}
			for _, l := range held {
				l.Release(t0, OK)
			}
			var in, load, cei []int
			for _, s := range r.samples {
				in, load, cei = append(in, s.Inflight), append(load, s.Load), append(cei, s.Ceiling)
			}
			if !slices.Equal(in, tc.wantInflight) || !slices.Equal(load, tc.wantLoad) || !slices.Equal(cei, tc.wantCei) {
				t.Fatalf("Inflight %v Load %v Ceiling %v, want %v %v %v", in, load, cei, tc.wantInflight, tc.wantLoad, tc.wantCei)
			}
		})
	}
}
