package gale_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// chargeWindow is what one window of check-then-charge streams did.
type chargeWindow struct {
	streams, charged, overrun, overLimit int64
}

// runChargeStreams runs check-then-charge streams on n limiters of one
// store, k at a time per limiter, in one window (all stamped now): each
// stream asks a check-only charge and, admitted, charges a cost of 1 to
// cmax; a client whose check-only is refused stops. It returns what the
// window did.
func runChargeStreams(t *testing.T, nodes []*gale.Limiter, key string, k int, cmax int64, now time.Time, seed uint64) chargeWindow {
	var w chargeWindow
	var streams, charged, overrun, overLimit atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes)*k)
	for i, l := range nodes {
		for j := 0; j < k; j++ {
			wg.Add(1)
			go func(l *gale.Limiter, rng *rand.Rand) {
				defer wg.Done()
				for {
					d, err := l.Charge(bg, key, 0, now)
					if err != nil {
						errs <- err
						return
					}
					if !d.Allowed {
						return
					}
					streams.Add(1)
					cost := 1 + rng.Int64N(cmax)
					d, err = l.Charge(bg, key, cost, now)
					if err != nil {
						errs <- err
						return
					}
					charged.Add(cost)
					overrun.Add(d.Overrun)
					if !d.Allowed {
						overLimit.Add(1)
					}
				}
			}(l, rand.New(rand.NewPCG(seed, uint64(i*k+j))))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	w.streams, w.charged, w.overrun, w.overLimit = streams.Load(), charged.Load(), overrun.Load(), overLimit.Load()
	return w
}

// chargeFleetBounds runs check-then-charge streams on 4 limiters of one
// store — strict, cached_deny, leased window-coupled — for several windows, and checks the README's check-then-charge bounds: a window
// counts at most Limit plus the charges of the streams in flight when it
// went past the limit — N·K·c for N nodes with K streams in flight each
// and charges of at most c — and leased adds the streams in flight on each
// node when its own credits ran out: Limit + 2·N·K·c. Every unit counted
// past the limit is reported as an overrun, once; and the budget is spent.
//
// Each node's store is node(): its own client of one server, as a sidecar
// has.
func chargeFleetBounds(t *testing.T, node func() gale.Store, count func(key string, r gale.Rule, now time.Time) int64) {
	const (
		n, k, limit = 4, 6, 1000
		batch, cmax = 50, 20
	)
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: limit, Period: time.Minute}
	for _, mode := range []gale.Mode{gale.Strict, gale.CachedDeny, gale.Leased} {
		t.Run(mode.String(), func(t *testing.T) {
			var nodes []*gale.Limiter
			for range n {
				nodes = append(nodes, newLimiter(t, node(), gale.Config{Rule: rule, Mode: mode, Lease: gale.LeaseConfig{Batch: batch}}))
			}
			bound := int64(limit + n*k*cmax)
			if mode == gale.Leased {
				bound = limit + 2*n*k*cmax
			}
			key := fmt.Sprintf("charges/%s/%d", t.Name(), time.Now().UnixNano())
			start := storetest.Timeline()
			var most int64
			for win := range 5 {
				now := start.Add(time.Duration(win)*time.Minute + 7*time.Second)
				w := runChargeStreams(t, nodes, key, k, cmax, now, uint64(win))
				counted := count(key, rule, now)
				t.Logf("window %d: %d streams, %d units charged, counted %d (limit %d, bound %d), %d charges OVER_LIMIT, %d units overrun",
					win, w.streams, w.charged, counted, limit, bound, w.overLimit, w.overrun)
				switch {
				case counted > bound:
					t.Fatalf("window %d counted %d > the bound %d", win, counted, bound)
				case counted < limit:
					t.Fatalf("window %d counted %d: the budget of %d was not spent", win, counted, limit)
				case w.overrun != counted-limit:
					t.Fatalf("window %d: %d units reported overrun, %d counted past the limit", win, w.overrun, counted-limit)
				case w.charged > counted:
					t.Fatalf("window %d: %d units charged, only %d counted", win, w.charged, counted)
				}
				most = max(most, counted)
			}
			t.Logf("most counted in a window: %d of limit %d (bound %d)", most, limit, bound)
		})
	}
}

// TestChargeFleetMemory: the bounds on the memory store.
func TestChargeFleetMemory(t *testing.T) {
	s := memstore.New()
	chargeFleetBounds(t, func() gale.Store { return s }, func(key string, r gale.Rule, now time.Time) int64 {
		return countFromStore(t, s, key, r, now)
	})
}

// TestChargeFleetRedis: the bounds with 4 limiters on one real Redis, each
// with its own client and store, as 4 sidecars are, reading each window's
// count from its hash.
func TestChargeFleetRedis(t *testing.T) {
	s, srv := newRedisStore(t)
	node := func() gale.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		ns, err := redisstore.New(c, redisstore.Options{Timeout: testenv.StoreDeadline})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ns.Close() })
		return ns
	}
	chargeFleetBounds(t, node, func(key string, r gale.Rule, now time.Time) int64 {
		v, err := srv.Client().HGet(bg, s.Key(key), "c").Result()
		if err != nil {
			t.Fatal(err)
		}
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
}

// countFromStore reads key's count in the window of now through a store's
// own operations: at or below the limit, a check-only charge's Remaining
// says it; past it, units are given back one by one until a check-only
// charge fits, then charged again.
func countFromStore(t *testing.T, s gale.Store, key string, r gale.Rule, now time.Time) int64 {
	d, err := s.Charge(bg, key, r, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		return r.Limit - d.Remaining
	}
	// Past the limit: count down by giving back until a check-only fits.
	_, end := r.WindowBounds(now.UnixMicro())
	var past int64
	for {
		if err := s.Return(bg, key, r, 1, time.UnixMicro(end), now); err != nil {
			t.Fatal(err)
		}
		past++
		if d, _ := s.Charge(bg, key, r, 0, now); d.Allowed {
			// Put the units back: the window stays as it was counted.
			if _, err := s.Charge(bg, key, r, past, now); err != nil {
				t.Fatal(err)
			}
			return r.Limit + past - d.Remaining
		}
	}
}
