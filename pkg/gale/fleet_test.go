package gale_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// fleet is N independent limiters (N nodes, each with its own L1) sharing one
// store, checking one key, with admissions counted per store window.
type fleet struct {
	t        *testing.T
	nodes    []*gale.Limiter
	rule     gale.Rule
	key      string
	mu       sync.Mutex
	admitted map[int64]int64 // window start (µs) → admissions
}

func newFleet(t *testing.T, s gale.Store, n int, rule gale.Rule, lease gale.LeaseConfig) *fleet {
	f := &fleet{t: t, rule: rule, key: fmt.Sprintf("fleet/%s/%d", t.Name(), time.Now().UnixNano()), admitted: map[int64]int64{}}
	for i := 0; i < n; i++ {
		f.nodes = append(f.nodes, newLimiter(t, s, gale.Config{Rule: rule, Mode: gale.Leased, Lease: lease}))
	}
	return f
}

func (f *fleet) check(node int, now time.Time) bool {
	d, err := f.nodes[node].Check(context.Background(), f.key, 1, now)
	if err != nil {
		f.t.Fatalf("node %d: %v", node, err)
	}
	if d.Allowed {
		ws, _ := f.rule.WindowBounds(now.UnixMicro())
		f.mu.Lock()
		f.admitted[ws]++
		f.mu.Unlock()
	}
	return d.Allowed
}

func (f *fleet) maxPerWindow() (most int64, windows int) {
	for _, n := range f.admitted {
		most = max(most, n)
	}
	return most, len(f.admitted)
}

// fleetBounds checks seed 04's two bounds against a store, for N ∈ {1,2,4,8}
// nodes over many windows: window-coupled leasing admits at most Limit per
// window (and reaches it); uncoupled admits at most Limit + N·(Batch−1), and a
// schedule reaches exactly that.
func fleetBounds(t *testing.T, s gale.Store, base time.Time) {
	const limit, batch = 40, 4
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: limit, Period: time.Minute}
	p := time.Minute
	for _, n := range []int{1, 2, 4, 8} {
		uncoupledBound := int64(limit + n*(batch-1))
		t.Run(fmt.Sprintf("N=%d/coupled/random", n), func(t *testing.T) {
			f := newFleet(t, s, n, rule, gale.LeaseConfig{Batch: batch})
			adversarialSchedule(f, base, p, int64(n))
			most, windows := f.maxPerWindow()
			if most > limit {
				t.Fatalf("a window admitted %d > Limit %d", most, limit)
			}
			if most != limit {
				t.Fatalf("no window reached the limit (max %d): the schedule is too weak to test the bound", most)
			}
			t.Logf("%d windows, max admitted per window %d (bound %d)", windows, most, limit)
		})
		t.Run(fmt.Sprintf("N=%d/coupled/concurrent", n), func(t *testing.T) {
			f := newFleet(t, s, n, rule, gale.LeaseConfig{Batch: batch})
			concurrentSchedule(f, base.Add(1000*p), p)
			if most, _ := f.maxPerWindow(); most > limit {
				t.Fatalf("a window admitted %d > Limit %d", most, limit)
			}
		})
		t.Run(fmt.Sprintf("N=%d/uncoupled/random", n), func(t *testing.T) {
			f := newFleet(t, s, n, rule, gale.LeaseConfig{Batch: batch, Uncoupled: true})
			adversarialSchedule(f, base.Add(2000*p), p, int64(n))
			if most, _ := f.maxPerWindow(); most > uncoupledBound {
				t.Fatalf("a window admitted %d > Limit + N·(Batch−1) = %d", most, uncoupledBound)
			}
		})
		t.Run(fmt.Sprintf("N=%d/uncoupled/tight", n), func(t *testing.T) {
			f := newFleet(t, s, n, rule, gale.LeaseConfig{Batch: batch, Uncoupled: true})
			w0 := base.Add(3000 * p)
			// Just before the boundary every node leases a batch and serves
			// one, keeping Batch−1.
			for i := range f.nodes {
				f.check(i, w0.Add(p-time.Microsecond))
			}
			// In the next window every node serves its carry-over and the
			// fleet then drains the store's fresh Limit.
			w1 := w0.Add(p)
			for open := true; open; {
				open = false
				for i := range f.nodes {
					open = f.check(i, w1) || open
				}
			}
			ws, _ := rule.WindowBounds(w1.UnixMicro())
			if got := f.admitted[ws]; got != uncoupledBound {
				t.Fatalf("tight schedule admitted %d in one window, want exactly Limit + N·(Batch−1) = %d", got, uncoupledBound)
			}
			// The same schedule, window-coupled, stays at Limit.
			g := newFleet(t, s, n, rule, gale.LeaseConfig{Batch: batch})
			for i := range g.nodes {
				g.check(i, w0.Add(4*p-time.Microsecond))
			}
			for open := true; open; {
				open = false
				for i := range g.nodes {
					open = g.check(i, w0.Add(4*p)) || open
				}
			}
			if most, _ := g.maxPerWindow(); most != limit {
				t.Fatalf("coupled under the tight schedule: max %d, want exactly %d", most, limit)
			}
		})
	}
}

// adversarialSchedule interleaves the nodes' checks at random over 150
// windows, with clock steps that favour the last microseconds of a window
// and the boundary itself, where carried-over credits do their damage.
func adversarialSchedule(f *fleet, base time.Time, p time.Duration, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 99))
	now := base
	end := base.Add(150 * p)
	for now.Before(end) {
		switch x := rng.IntN(1000); {
		case x < 600:
		case x < 985:
			now = now.Add(time.Duration(rng.Int64N(int64(p / 100))))
		case x < 995:
			next := now.Truncate(p).Add(p)
			now = next.Add(-time.Duration(1 + rng.Int64N(3))) // the window's last µs
		default:
			now = now.Truncate(p).Add(p) // exactly the boundary
		}
		f.check(rng.IntN(len(f.nodes)), now)
	}
}

// concurrentSchedule runs the nodes in parallel goroutines at a few instants
// per window (mid-window, the last microsecond, the boundary), so the store
// sees real races between nodes.
func concurrentSchedule(f *fleet, base time.Time, p time.Duration) {
	for w := 0; w < 20; w++ {
		ws := base.Add(time.Duration(w) * p)
		for _, at := range []time.Time{ws.Add(p / 2), ws.Add(p - time.Microsecond)} {
			var wg sync.WaitGroup
			var spins atomic.Int64
			for i := range f.nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := 0; k < 15; k++ {
						f.check(i, at)
						spins.Add(1)
					}
				}()
			}
			wg.Wait()
		}
	}
}
