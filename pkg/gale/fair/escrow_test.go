package fair

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// t0 starts a minute window: 1_699_999_980 is a multiple of 60.
var t0 = time.Unix(1_699_999_980, 0)

// step is one call on a timeline and the decision it must get.
type step struct {
	at       time.Duration // since t0
	tenant   string
	cost     int64
	reason   Reason
	borrowed int64
}

func mustNew(t testing.TB, cfg Config) *Escrow {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// repeat returns n copies of s.
func repeat(n int, s step) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestEscrowTimeline(t *testing.T) {
	const w = time.Minute
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{
			name: "cap holds whatever fairness says",
			cfg:  Config{Limit: 10, Window: w},
			steps: []step{
				{0, "a", 4, ReasonShare, 0},
				{1, "a", 4, ReasonShare, 0},
				{2, "a", 4, ReasonCap, 0},
				{3, "a", 2, ReasonShare, 0},
				{4, "b", 1, ReasonCap, 0},
				// A new window. b's demand of window 1 is its forecast: it
				// claims 1 of its guarantee of 5, so a may borrow only 4.
				{w, "a", 10, ReasonDenied, 0},
				{w + 1, "a", 9, ReasonBorrow, 4},
				{w + 2, "b", 1, ReasonShare, 0},
			},
		},
		{
			name: "a call straddling the guarantee borrows only its excess",
			cfg:  Config{Limit: 100, Window: w, Weights: map[string]float64{"a": 1, "b": 1}},
			steps: []step{
				{0, "a", 40, ReasonShare, 0},
				{1, "a", 30, ReasonBorrow, 20}, // 10 within a's 50, 20 of idle b's share
				{2, "a", 30, ReasonBorrow, 30},
				{3, "a", 1, ReasonCap, 0},
			},
		},
		{
			// Guarantees a 75, b 25. In window 1 b asks first and borrows
			// a's unclaimed share. In window 2 a floods first, but b's
			// demand of window 1 keeps its guarantee claimed, and b, arriving
			// last, is served its 25 in full.
			name: "guaranteed share is served to a steady tenant arriving late",
			cfg:  Config{Limit: 100, Window: w, Weights: map[string]float64{"a": 3, "b": 1}},
			steps: append(append([]step{
				{0, "b", 50, ReasonBorrow, 25},
				{1, "a", 50, ReasonShare, 0},
				{2, "a", 25, ReasonCap, 0},
			}, repeat(7, step{w, "a", 10, ReasonShare, 0})...), []step{
				{w + 1, "a", 10, ReasonDenied, 0}, // would take 5 of b's claimed 25
				{w + 2, "a", 5, ReasonShare, 0},
				{w + 3, "b", 25, ReasonShare, 0},
				{w + 4, "b", 1, ReasonCap, 0},
			}...),
		},
		{
			// x's guarantee is 2/3 of 90; when y arrives W grows to 1+2+2
			// and y's guarantee is 2/5 of 90 = 36.
			name: "unconfigured tenants weigh DefaultWeight",
			cfg:  Config{Limit: 90, Window: w, Weights: map[string]float64{"a": 1}, DefaultWeight: 2},
			steps: []step{
				{0, "x", 60, ReasonShare, 0},
				{1, "x", 1, ReasonBorrow, 1},
				{2, "y", 29, ReasonShare, 0},
				{3, "y", 1, ReasonCap, 0},
			},
		},
		{
			// c, d and e share the overflow account: W = 3, its guarantee
			// 3 of 10, and it borrows beyond like any tenant. a and b asked
			// in window 1, so window 2 still tracks them and c is still in
			// the overflow; they are forgotten after a window without
			// asking, and c is tracked by name.
			name: "tenants past MaxTenants share the overflow account",
			cfg:  Config{Limit: 10, Window: w, MaxTenants: 2},
			steps: []step{
				{0, "a", 1, ReasonShare, 0},
				{1, "b", 1, ReasonShare, 0},
				{2, "c", 1, ReasonShare, 0},
				{3, "d", 2, ReasonShare, 0},
				{4, "e", 1, ReasonBorrow, 1},
				{w, "c", 1, ReasonShare, 0},
				{2 * w, "c", 1, ReasonShare, 0},
			},
		},
		{
			// g is configured: tracked by name though a fills MaxTenants.
			// W = 2 + 1 + 1: g's guarantee 5, the overflow's 2.
			name: "a configured tenant is never in the overflow, and the cap holds",
			cfg:  Config{Limit: 10, Window: w, Weights: map[string]float64{"g": 2}, MaxTenants: 1},
			steps: []step{
				{0, "a", 1, ReasonShare, 0},
				{1, "x", 1, ReasonShare, 0},
				{2, "g", 5, ReasonShare, 0},
				{3, "y", 3, ReasonBorrow, 2},
				{4, "z", 1, ReasonCap, 0},
				{5, "g", 1, ReasonCap, 0},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := mustNew(t, tc.cfg)
			admitted := map[time.Time]int64{}
			for i, s := range tc.steps {
				d := e.Decide(s.tenant, s.cost, t0.Add(s.at))
				allowed := s.reason == ReasonShare || s.reason == ReasonBorrow
				if d.Reason != s.reason || d.Borrowed != s.borrowed || d.Allowed != allowed {
					t.Fatalf("step %d %+v: got %+v", i, s, d)
				}
				if d.Allowed {
					admitted[d.ResetAt] += s.cost
				}
				if admitted[d.ResetAt] > tc.cfg.Limit {
					t.Fatalf("step %d: window admits %d > Limit", i, admitted[d.ResetAt])
				}
			}
		})
	}
}

// backlog runs one window of round-robin calls of cost each until every
// tenant has asked for its demand, and returns what each was admitted.
func backlog(t *testing.T, e *Escrow, start time.Time, cost int64, tenants []string, demands []int64) []int64 {
	t.Helper()
	got := make([]int64, len(tenants))
	asked := make([]int64, len(tenants))
	for step := 0; ; step++ {
		progress := false
		for i, name := range tenants {
			if asked[i]+cost > demands[i] {
				continue
			}
			asked[i] += cost
			progress = true
			d := e.Decide(name, cost, start.Add(time.Duration(step)*time.Microsecond))
			if d.Borrowed < 0 || d.Borrowed > cost {
				t.Fatalf("%s borrowed %d of a call of %d", name, d.Borrowed, cost)
			}
			if d.Allowed {
				got[i] += cost
			}
		}
		if !progress {
			return got
		}
	}
}

func TestEscrowLendsIdleShare(t *testing.T) {
	const w = time.Minute
	e := mustNew(t, Config{Limit: 100, Window: w, Weights: map[string]float64{"a": 3, "b": 1, "idle": 4}})
	tenants, demands := []string{"a", "b"}, []int64{100, 100}
	// Window 1: demand is revealed 5 at a time, so borrowing is first come:
	// the budget is used in full, but not yet in proportion.
	if got := backlog(t, e, t0, 5, tenants, demands); got[0]+got[1] != 100 {
		t.Fatalf("window 1 admits %v, want 100 in all", got)
	}
	// From window 2 on, window 1's demand is the forecast: a and b share
	// all of the budget, idle's 50 included, 3:1.
	for k := 1; k <= 3; k++ {
		if got := backlog(t, e, t0.Add(time.Duration(k)*w), 5, tenants, demands); got[0] != 75 || got[1] != 25 {
			t.Fatalf("window %d admits %v, want [75 25]", k+1, got)
		}
	}
	if s := e.Shares(); len(s) != 2 || s["a"] != 75 || s["b"] != 25 {
		t.Fatalf("Shares = %v, want only the tenants seen, a 75 b 25", s)
	}
	if a := e.Admitted(); a["a"] != 75 || a["b"] != 25 {
		t.Fatalf("Admitted = %v", a)
	}
}

// TestEscrowSteadyStateIsWaterFill: under steady backlogged demand, from the
// second window on, each tenant is admitted its WaterFill allocation in
// whole units, rounded down or up (the rounding's remainder goes to whoever
// asks first), and the window admits min(Σ demand, Limit), on seeded
// random instances. Every window respects the cap, and every borrow
// is at most its call's cost.
func TestEscrowSteadyStateIsWaterFill(t *testing.T) {
	const w = time.Second
	r := rand.New(rand.NewPCG(7, 11))
	const runs = 2000
	for run := range runs {
		n := 1 + r.IntN(8)
		limit := int64(1 + r.IntN(500))
		cfg := Config{Limit: limit, Window: w, Weights: map[string]float64{}}
		tenants, demands := make([]string, n), make([]int64, n)
		fw, fd := make([]float64, n), make([]float64, n)
		for i := range n {
			tenants[i] = string(rune('a' + i))
			fw[i] = 0.1 + 9.9*r.Float64()
			cfg.Weights[tenants[i]] = fw[i]
			demands[i] = int64(r.IntN(201))
			fd[i] = float64(demands[i])
		}
		e := mustNew(t, cfg)
		want := WaterFill(float64(limit), fd, fw)
		for k := range 3 {
			got := backlog(t, e, t0.Add(time.Duration(k)*w), 1, tenants, demands)
			var total, sumDemand int64
			for i := range got {
				total += got[i]
				sumDemand += demands[i]
			}
			if total > limit {
				t.Fatalf("run %d window %d: admits %d > Limit %d", run, k, total, limit)
			}
			if total < min(sumDemand, limit)-int64(n) {
				t.Fatalf("run %d window %d: admits %d, want at least min(Σ demand, Limit) − %d = %d (demands %v, got %v)",
					run, k, total, n, min(sumDemand, limit)-int64(n), demands, got)
			}
			if k == 0 {
				continue
			}
			if total != min(sumDemand, limit) {
				t.Fatalf("run %d window %d: admits %d, want min(Σ demand, Limit) = %d (demands %v, got %v)", run, k, total, min(sumDemand, limit), demands, got)
			}
			for i := range got {
				if f := float64(got[i]); f > math.Ceil(want[i]-1e-9)+1e-6 || f < math.Floor(want[i]+1e-9)-1e-6 {
					t.Fatalf("run %d window %d (limit %d, weights %v, demands %v): got %v, want WaterFill %v",
						run, k, limit, fw, demands, got, want)
				}
			}
		}
	}
	t.Logf("%d random instances, 3 windows each", runs)
}

// TestEscrowConcurrent hammers one escrow from several goroutines (run it
// with -race): every window admits at most Limit.
func TestEscrowConcurrent(t *testing.T) {
	const limit = 1000
	e := mustNew(t, Config{Limit: limit, Window: 10 * time.Millisecond, Weights: map[string]float64{"a": 2, "b": 1}})
	var mu sync.Mutex
	admitted := map[time.Time]int64{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 5000 {
				now := t0.Add(time.Duration(i/100) * time.Millisecond)
				cost := 1 + r.Int64N(5)
				d := e.Decide([]string{"a", "b", "c", "d"}[r.IntN(4)], cost, now)
				if d.Allowed {
					mu.Lock()
					admitted[d.ResetAt] += cost
					mu.Unlock()
				}
				if i%500 == 0 {
					e.Shares()
				}
			}
		})
	}
	wg.Wait()
	for end, n := range admitted {
		if n > limit {
			t.Errorf("window ending %v admits %d > %d", end, n, limit)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"zero limit", Config{Window: time.Second}},
		{"zero window", Config{Limit: 1}},
		{"limit too large", Config{Limit: 1 << 41, Window: time.Second}},
		{"negative default weight", Config{Limit: 1, Window: time.Second, DefaultWeight: -1}},
		{"infinite default weight", Config{Limit: 1, Window: time.Second, DefaultWeight: math.Inf(1)}},
		{"zero weight", Config{Limit: 1, Window: time.Second, Weights: map[string]float64{"a": 0}}},
		{"NaN weight", Config{Limit: 1, Window: time.Second, Weights: map[string]float64{"a": math.NaN()}}},
		{"negative MaxTenants", Config{Limit: 1, Window: time.Second, MaxTenants: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestDecidePanicsOnCostBelowOne(t *testing.T) {
	e := mustNew(t, Config{Limit: 1, Window: time.Second})
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	e.Decide("a", 0, t0)
}
