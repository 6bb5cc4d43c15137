package engine_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// Leased mode over a real Redis, several engines (nodes) sharing it, on a
// fixed timeline of request stamps: the store uses the stamps (no server
// time), so every window boundary is where the test puts it, and admissions
// are counted by the window of their stamp.

// holdStore is a store whose Check calls on keys containing marker can be
// held, or sent to another store; everything else goes to Store.
type holdStore struct {
	gale.Store
	marker string
	// slow, when set, takes the marked checks: a second client of the same
	// Redis with one pipeline of one command, so marked checks queue behind
	// each other as behind a congested dependency.
	slow gale.Store
	// arrived counts the marked checks that have reached the store.
	arrived atomic.Int64
	mu      sync.Mutex
	gate    chan struct{} // while non-nil, marked checks wait for it to close
}

func (s *holdStore) Check(ctx context.Context, key string, r gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	if !strings.Contains(key, s.marker) {
		return s.Store.Check(ctx, key, r, cost, now)
	}
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	s.arrived.Add(1)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return gale.Decision{}, ctx.Err()
		}
	}
	if s.slow != nil {
		return s.slow.Check(ctx, key, r, cost, now)
	}
	return s.Store.Check(ctx, key, r, cost, now)
}

// hold makes marked checks wait until release is called.
func (s *holdStore) hold() (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.gate = gate
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.gate = nil
		s.mu.Unlock()
		close(gate)
	}
}

// redisStore returns a store on a new redis-server, and that server.
func redisStore(t *testing.T, opts redisstore.Options) (*redisstore.Store, *testenv.Redis) {
	t.Helper()
	srv := testenv.StartRedis(t)
	s, err := redisstore.New(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, srv
}

// nodes returns n engines on store s, each with its own limiters (its own
// L1), all loaded with files. The store timeout is long: a held check must
// not time out.
func nodes(t *testing.T, s gale.Store, n int, files map[string]string) []*engine.Engine {
	t.Helper()
	var es []*engine.Engine
	for i := 0; i < n; i++ {
		e, err := engine.New(engine.Options{Store: s, StoreTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Load(bg, load(t, files)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(bg) })
		es = append(es, e)
	}
	return es
}

// refundPolicy: b is leased (window-coupled, the default), 3000 a minute in
// batches of 40; t is strict, 1 a day, and used up by each test before it
// starts, so it denies every request carrying it and b's unit is refunded.
const refundPolicy = `
domain: holes
descriptors:
  - key: b
    mode: leased
    lease: {batch: 40}
    rate_limit: {unit: minute, requests_per_unit: 3000}
  - key: t
    rate_limit: {unit: day, requests_per_unit: 1}
`

const refundLimit = 3000

var (
	bAlone = req("holes", "b=k")
	bAndT  = req("holes", "b=k", "t=held")
)

// drain sends b-alone requests stamped at to every node, round after round,
// until a whole round is denied, and returns the number admitted. Run with
// nothing else in flight, it leaves every node without credits for at's
// window and the store's window spent.
func drain(t *testing.T, es []*engine.Engine, at time.Time) int {
	t.Helper()
	admitted := 0
	for open := true; open; {
		open = false
		for _, e := range es {
			if decide(t, e, bAlone, at).Code == engine.CodeOK {
				admitted++
				open = true
			}
		}
	}
	return admitted
}

// TestRefundAfterTheBoundaryStaysInItsWindow: a request carrying b and t
// takes one unit of b from window W's credits, then waits on t's store check
// while the same node, asked for b in window W+1, drops W's credits and
// leases W+1's. t denies, and b's unit is refunded: it belongs to W, so it
// must not be added to W+1's credits. Drained fleet-wide, W+1 admits at most
// Limit.
func TestRefundAfterTheBoundaryStaysInItsWindow(t *testing.T) {
	rs, _ := redisStore(t, redisstore.Options{})
	s := &holdStore{Store: rs, marker: "held"}
	es := nodes(t, s, 4, map[string]string{"holes.yaml": refundPolicy})
	w := storetest.Timeline().Add(10 * time.Minute)
	lastOfW := w.Add(time.Minute - time.Millisecond)
	w1 := w.Add(time.Minute)

	if got := decide(t, es[0], req("holes", "t=held"), lastOfW); got.Code != engine.CodeOK {
		t.Fatalf("using up t: %s", codes(got))
	}
	// Node 0 leases W's credits.
	if got := decide(t, es[0], bAlone, lastOfW); got.Code != engine.CodeOK {
		t.Fatalf("b in W: %s", codes(got))
	}
	// {b, t} in W: b takes a unit of W's credits, then t's check is held.
	release := s.hold()
	held := make(chan *engine.Response, 1)
	go func() {
		resp, err := es[0].Decide(bg, bAndT, lastOfW)
		if err != nil {
			t.Errorf("{b, t}: %v", err)
		}
		held <- resp
	}()
	if !testenv.Eventually(func() bool { return s.arrived.Load() == 2 }) {
		release()
		t.Fatal("t's check never reached the store")
	}
	// W+1 on node 0: W's credits are dropped and W+1's leased.
	admitted := 0
	if got := decide(t, es[0], bAlone, w1); got.Code != engine.CodeOK {
		release()
		t.Fatalf("b in W+1: %s", codes(got))
	}
	admitted++
	// t denies; b's unit, taken from W, is refunded.
	release()
	if got := <-held; got == nil || codes(got) != "OVER_LIMIT OK OVER_LIMIT" {
		t.Fatal("{b, t} was not denied by t alone")
	}
	admitted += drain(t, es, w1)
	if admitted > refundLimit {
		t.Fatalf("window W+1 admitted %d b requests across 4 nodes, above Limit %d: a unit taken from W and refunded after W+1's lease was added to W+1's credits", admitted, refundLimit)
	}
	if admitted < refundLimit {
		t.Fatalf("window W+1 admitted %d < Limit %d after a full drain: the schedule does not reach the bound", admitted, refundLimit)
	}
}

// TestRefundsAcrossBoundariesFleet: four nodes, goroutines sending {b, t}
// (always denied, b refunded) or b alone at random, window after window. In
// each "hold" window the nodes keep credits; at its end the window's last
// {b, t} requests are still waiting on t (t's checks queue on a one-command
// pipeline) when the next window's requests start, lease and drain it; the
// drained window must admit at most Limit b requests.
//
// The next window's requests start only once every request of the hold
// window has taken its unit of b (b alone has finished, {b, t} has reached
// t's check). Otherwise a request stamped in the hold window could be served
// from the next window's credits, or lease at the store after the next
// window began (the store keeps one window per key and would start the
// older one afresh): those are not the refund's fault, and counting by
// stamp would blame it.
func TestRefundsAcrossBoundariesFleet(t *testing.T) {
	const (
		limit, batch = 400, 40
		nodeCount    = 4
		perNode      = 4  // goroutines per node
		holdEach     = 6  // requests per goroutine in a hold window
		drainEach    = 70 // requests per goroutine in a drained window
		pairs        = 8  // hold windows, each followed by a drained window
	)
	rs, srv := redisStore(t, redisstore.Options{})
	slow, err := redisstore.New(srv.Client(), redisstore.Options{Pipelines: 1, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	s := &holdStore{Store: rs, marker: "held", slow: slow}
	src := strings.NewReplacer("batch: 40", fmt.Sprintf("batch: %d", batch), "3000", fmt.Sprint(limit)).Replace(refundPolicy)
	es := nodes(t, s, nodeCount, map[string]string{"holes.yaml": src})
	base := storetest.Timeline().Add(20 * time.Minute)
	if got := decide(t, es[0], req("holes", "t=held"), base); got.Code != engine.CodeOK {
		t.Fatalf("using up t: %s", codes(got))
	}
	rng := rand.New(rand.NewPCG(4, 40))
	var rngMu sync.Mutex
	coin := func() bool { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(2) == 0 }

	var (
		mu       sync.Mutex
		admitted = map[time.Time]int{} // window start → b-alone admissions
		btSent   atomic.Int64          // {b, t} requests sent: t checks to expect
		all      sync.WaitGroup
	)
	btSent.Add(1)       // the request that used up t
	t.Cleanup(all.Wait) // before the engines close, should the test stop early
	// send sends b alone or {b, t}, at random, to e at at, counting b's
	// admissions by the window of at. passed is called once the request has
	// passed b, as far as the caller can tell: before a {b, t} request (the
	// barrier then waits for its t check to arrive), after b alone.
	send := func(e *engine.Engine, at time.Time, passed func()) {
		r := bAlone
		if coin() {
			r = bAndT
			btSent.Add(1)
			passed()
		}
		resp, err := e.Decide(bg, r, at)
		if r == bAlone {
			passed()
		}
		if err != nil {
			t.Errorf("Decide: %v", err)
			return
		}
		if r == bAndT && resp.Code == engine.CodeOK {
			t.Errorf("{b, t} admitted at %v: t was used up", at)
		}
		if r == bAlone && resp.Code == engine.CodeOK {
			mu.Lock()
			admitted[at.Truncate(time.Minute)]++
			mu.Unlock()
		}
	}
	// phase starts each node's goroutines sending each requests stamped in
	// window w, moving forward through it, and returns once every request
	// has passed b (the goroutines may still be waiting on t).
	phase := func(w time.Time, each int) {
		var passed sync.WaitGroup
		var step atomic.Int64
		for _, e := range es {
			for g := 0; g < perNode; g++ {
				passed.Add(1)
				all.Add(1)
				go func() {
					defer all.Done()
					for i := 0; i < each; i++ {
						done := func() {}
						if i == each-1 {
							done = passed.Done
						}
						at := w.Add(min(time.Duration(step.Add(1))*time.Millisecond, time.Minute-time.Millisecond))
						send(e, at, done)
					}
				}()
			}
		}
		passed.Wait()
		if !testenv.Eventually(func() bool { return s.arrived.Load() == btSent.Load() }) {
			t.Fatalf("%d {b, t} requests sent, %d t checks arrived", btSent.Load(), s.arrived.Load())
		}
	}

	var over []string
	for p := 0; p < pairs; p++ {
		hold := base.Add(time.Duration(2*p+1) * time.Minute)
		next := hold.Add(time.Minute)
		phase(hold, holdEach)
		phase(next, drainEach)
		all.Wait()
		swept := drain(t, es, next.Add(time.Minute-time.Millisecond))
		mu.Lock()
		admitted[next] += swept
		got := admitted[next]
		mu.Unlock()
		if got > limit {
			over = append(over, fmt.Sprintf("window %d: %d", 2*p+2, got))
		} else if got < limit {
			t.Fatalf("window %d admitted %d < Limit %d after a full drain: the schedule does not reach the bound", 2*p+2, got, limit)
		}
	}
	for w, n := range admitted {
		if n > limit && (w.Sub(base)/time.Minute)%2 == 1 {
			t.Errorf("hold window at %v admitted %d > Limit %d", w, n, limit)
		}
	}
	if len(over) > 0 {
		t.Fatalf("drained windows admitted more than Limit %d b requests across %d nodes (%s): units taken from the previous window and refunded after the node leased the next were added to the next window's credits", limit, nodeCount, strings.Join(over, ", "))
	}
}

// negativePolicy: b, 3000 a minute, strict or leased in batches of 40.
const negativePolicy = `
domain: neg
descriptors:
  - key: b
    mode: %MODE%
    rate_limit: {unit: minute, requests_per_unit: 3000}
`

// TestNegativeHitsRestoreAtMostWhatWasUsed: a negative hit (is_negative_hits)
// can give back at most the units its key took in the window. One hit, then a
// negative hit of 1,000,000, then a flood from four nodes in the same window:
// at most Limit + 1 admissions in all (the first hit, and Limit with its unit
// given back). Strict mode holds already and is the control.
func TestNegativeHitsRestoreAtMostWhatWasUsed(t *testing.T) {
	const limit, negative = 3000, 1_000_000
	// A node that mints credits would serve them all: stop counting well
	// above the bound.
	const enough = 3 * limit
	rs, _ := redisStore(t, redisstore.Options{})
	for _, mode := range []string{"strict", "leased"} {
		t.Run(mode, func(t *testing.T) {
			src := strings.ReplaceAll(negativePolicy, "%MODE%", mode)
			if mode == "leased" {
				src = strings.Replace(src, "    rate_limit:", "    lease: {batch: 40}\n    rate_limit:", 1)
			}
			es := nodes(t, rs, 4, map[string]string{"neg.yaml": src})
			key := "b=" + mode // a key of its own per subtest
			at := storetest.Timeline().Add(30*time.Minute + 20*time.Second)
			if got := decide(t, es[0], req("neg", key), at); got.Code != engine.CodeOK {
				t.Fatalf("first hit: %s", codes(got))
			}
			neg := req("neg", key)
			neg.HitsAddend = negative
			neg.Descriptors[0].Negative = true
			back := decide(t, es[0], neg, at)
			if back.Code != engine.CodeOK {
				t.Fatalf("negative hit: %s", codes(back))
			}
			// The first node's next answer says what it now thinks remains.
			probe := decide(t, es[0], req("neg", key), at)
			if probe.Code != engine.CodeOK {
				t.Fatalf("hit after the negative hit: %s", codes(probe))
			}
			var admitted atomic.Int64
			admitted.Add(2)
			var wg sync.WaitGroup
			for _, e := range es {
				for g := 0; g < 2; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for admitted.Load() < enough {
							resp, err := e.Decide(bg, req("neg", key), at)
							if err != nil {
								t.Errorf("Decide: %v", err)
								return
							}
							if resp.Code != engine.CodeOK {
								return
							}
							admitted.Add(1)
						}
					}()
				}
			}
			wg.Wait()
			p := admitted.Load()
			if p < enough {
				// Every node was denied: take what credits are left.
				for _, e := range es {
					for decide(t, e, req("neg", key), at).Code == engine.CodeOK {
						p++
					}
				}
			}
			switch {
			case p >= enough:
				t.Fatalf("%s: one window admitted at least %d (counting stopped there; after the negative hit the first node reported %d remaining), above Limit + 1 = %d: a negative hit of %d restored more than the 1 unit used", mode, p, probe.Statuses[0].Remaining, limit+1, negative)
			case p > limit+1:
				t.Fatalf("%s: one window admitted %d, above Limit + 1 = %d: a negative hit of %d restored more than the 1 unit used", mode, p, limit+1, negative)
			case p < limit:
				t.Fatalf("%s: the flood admitted only %d of Limit %d: it does not reach the bound", mode, p, limit)
			}
			t.Logf("%s: %d admitted in one window (bound %d)", mode, p, limit+1)
		})
	}
}
