package sim

import (
	"path/filepath"
	"testing"
	"time"
)

// scenarioDir holds the scenarios the CLI ships.
var scenarioDir = filepath.Join("..", "..", "config", "scenarios")

// TestCapacityDrop runs config/scenarios/capacity-drop.yaml as shipped: the
// backend drops to a third of its capacity at 60 s and recovers at 150 s
// under a steady load of 1.5× the degraded capacity.
//
// In every phase, after the scenario's settle time (10 s), each adaptive
// controller must keep the p99 service latency ≤ 2× base and the goodput
// (completions within 2× base per second) ≥ 90% of min(offered, capacity);
// the static limit tuned for the healthy backend must break the latency
// bound once the capacity drops. See Phase for the definitions.
func TestCapacityDrop(t *testing.T) {
	t.Parallel()
	sc, err := Load(filepath.Join(scenarioDir, "capacity-drop.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := RunAll(sc)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 5 {
		t.Fatalf("capacity-drop.yaml runs %d controllers, want static and the four adaptive ones", len(results))
	}
	for _, res := range results {
		if len(res.Phases) != 3 {
			t.Fatalf("%s: %d phases, want 3 (healthy, degraded, recovered)", res.Controller, len(res.Phases))
		}
		for _, p := range res.Phases {
			latOK, gpOK := MeetsBounds(sc, p)
			t.Logf("%-9s %3.0fs–%3.0fs cap×%.2f  limit %5.1f  p99 %6.1fms  goodput %5.1f/s = %5.1f%% of %5.1f",
				res.Controller, p.From.Seconds(), p.End.Seconds(), p.CapacityFactor, p.MeanLimit,
				ms(p.P99), p.Goodput, p.GoodputPct, p.Target)
			switch {
			case res.Kind == KindStatic && p.CapacityFactor < 1:
				if latOK {
					t.Errorf("static: p99 %v with capacity ×%.2f stayed within %v: the scenario no longer shows a static limit failing",
						p.P99, p.CapacityFactor, GoodFactor*sc.Backend.Base)
				}
			case res.Kind == KindStatic:
				// A static limit tuned for the healthy backend is fine on it.
			default:
				if !latOK {
					t.Errorf("%s %v–%v: p99 %v > %v", res.Controller, p.From, p.End, p.P99, GoodFactor*sc.Backend.Base)
				}
				if !gpOK {
					t.Errorf("%s %v–%v: goodput %.1f/s is %.1f%% of %.1f/s, below 90%%", res.Controller, p.From, p.End, p.Goodput, p.GoodputPct, p.Target)
				}
			}
		}
	}
}

// TestBackendCapacity checks the capacity definition against the model it
// describes: a static limit saturated with work completes c·Knee/(2·Base)
// requests per second at a concurrency of c·Knee, and 2x/(1+x²) of that at
// x·c·Knee (Little's law on latency Base·(1+x²)).
func TestBackendCapacity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		factor    float64
		limit     int
		wantShare float64 // of capacity
	}{
		{"at the knee", 1, 60, 1},
		{"half the knee", 1, 30, 0.8},
		{"twice the knee", 1, 120, 0.8},
		{"a third of capacity, at its knee", 1.0 / 3, 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &Scenario{
				Name: "saturated", Seed: 7, Duration: 30 * time.Second, Settle: 5 * time.Second,
				Backend: Backend{Base: 50 * time.Millisecond, Knee: 60, Capacity: []CapacityStep{{0, tc.factor}}},
				Load:    []RateStep{{0, 2000}},
				Queue:   Queue{Max: 1000, Timeout: time.Second},
				Controllers: []ControllerSpec{
					{Name: "static", Kind: KindStatic, Limit: tc.limit},
				},
			}
			if err := sc.Validate(); err != nil {
				t.Fatal(err)
			}
			res, err := Run(sc, sc.Controllers[0])
			if err != nil {
				t.Fatal(err)
			}
			p := res.Phases[0]
			got := float64(p.Completed) / (p.End - p.From).Seconds()
			want := tc.wantShare * p.Capacity
			if got < want*0.98 || got > want*1.02 {
				t.Errorf("%.1f completions/s, want %.1f (%.0f%% of capacity %.1f)", got, want, 100*tc.wantShare, p.Capacity)
			}
		})
	}
}
