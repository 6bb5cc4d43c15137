package engine_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const (
	mixedLimit   = 300 // b's requests per minute
	mixedBatch   = 20  // b's lease batch (16 after a reload that replaces b)
	mixedNodes   = 4
	mixedWorkers = 3 // goroutines per node
	mixedMaxKeys = 8 // each limiter's L1: one shard of 8 keys, so churn evicts
	mixedWindows = 8
)

// mixedSet is the mixed fleet's policy: t strict, 1 a day; b leased and
// window-coupled in batches of batch, its idle credits returned after 10s,
// or no b at all when batch is 0 (b retired).
func mixedSet(t *testing.T, batch int) *policy.Set {
	src := "domain: holes\ndescriptors:\n  - key: t\n    rate_limit: {unit: day, requests_per_unit: 1}\n"
	if batch > 0 {
		src += fmt.Sprintf("  - key: b\n    mode: leased\n    lease: {batch: %d, window_coupled: true, return_idle_after: 10s}\n"+
			"    rate_limit: {unit: minute, requests_per_unit: %d}\n", batch, mixedLimit)
	}
	return load(t, map[string]string{"holes.yaml": src})
}

// mixedStep is one request of the schedule: b alone, {b, t}, b for another
// key (churning L1), or a negative hit of n on b.
type mixedStep struct {
	kind byte // 'b', 't', 'c' or 'n'
	n    uint32
}

// mixedFleet is the fleet and its per-window tally, by the window of each
// request's stamp.
type mixedFleet struct {
	t      *testing.T
	store  *holdStore
	base   time.Time
	clocks []*clock.Fake    // each node's clock: its idle sweep and Close read it
	es     []*engine.Engine // the engine serving as each node; replaced only between phases
	batch  []int            // each node's b batch
	all    sync.WaitGroup   // every request goroutine, held ones included
	held   []func()         // every hold's release, for the cleanup
	mu     sync.Mutex       // guards counts
	counts [mixedWindows]mixedCount
}

// mixedCount is one window's tally.
type mixedCount struct {
	// admitted is the b-alone requests admitted.
	admitted int
	// allowance is what the window's negative hits may give back: a node
	// gives back at most what it served from the window's credits, so at
	// most n, and at most j if its entry was fresh and has served j since.
	allowance int
	// carried is the units of b {b, t} requests took in the window and held
	// past its end: refunded after the boundary, the window loses them.
	carried int
}

// start returns a new engine for node i, b in batches of mixedBatch.
func (f *mixedFleet) start(i int) *engine.Engine {
	e, err := engine.New(engine.Options{Store: f.store, StoreTimeout: 10 * time.Second, MaxKeys: mixedMaxKeys, Clock: f.clocks[i]})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = e.Close(bg) }) // idempotent
	f.load(e, mixedBatch)
	return e
}

// load swaps mixedSet(batch) into e.
func (f *mixedFleet) load(e *engine.Engine, batch int) {
	if err := e.Load(bg, mixedSet(f.t, batch)); err != nil {
		f.t.Fatal(err)
	}
}

// add adds c to the tally of at's window, and reports whether the window
// is now over its bound.
func (f *mixedFleet) add(at time.Time, c mixedCount) (over bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &f.counts[at.Sub(f.base)/time.Minute]
	w.admitted, w.allowance, w.carried = w.admitted+c.admitted, w.allowance+c.allowance, w.carried+c.carried
	return w.admitted-w.allowance > mixedLimit
}

// send sends st to e at at, and returns the answer (nil on error) and what
// it counts for: b alone admitted, or a negative hit's n.
func (f *mixedFleet) send(e *engine.Engine, st mixedStep, at time.Time) (*engine.Response, mixedCount) {
	r := bAlone
	switch st.kind {
	case 't':
		r = bAndT
	case 'c':
		r = req("holes", fmt.Sprintf("b=c%d", st.n))
	case 'n':
		r = req("holes", "b=k")
		r.HitsAddend = st.n
		r.Descriptors[0].Negative = true
	}
	resp, err := e.Decide(bg, r, at)
	var c mixedCount
	switch {
	case err != nil:
		f.t.Errorf("Decide %c at %v: %v", st.kind, at, err)
	case st.kind == 't' && resp.Code == engine.CodeOK:
		f.t.Errorf("{b, t} admitted at %v: t was used up", at)
	case st.kind == 'b' && resp.Code == engine.CodeOK:
		c.admitted = 1
	case st.kind == 'n':
		c.allowance = int(st.n)
	}
	return resp, c
}

// run draws steps requests for each of mixedWorkers goroutines per node,
// sends them stamped evenly over [start, start+span), and waits for them.
// With a drain instant, each goroutine then sends b alone stamped there
// until its node denies it or the window is over its bound (a node that
// minted credits would serve a million).
func (f *mixedFleet) run(rng *rand.Rand, steps int, start time.Time, span time.Duration, drain time.Time) {
	var wg sync.WaitGroup
	total := mixedNodes * mixedWorkers
	for i, e := range f.es {
		for g := range mixedWorkers {
			plan := make([]mixedStep, steps)
			for s := range plan {
				plan[s] = mixedDraw(rng)
			}
			wg.Add(1)
			f.all.Add(1)
			go func() {
				defer f.all.Done()
				defer wg.Done()
				for s, st := range plan {
					at := start.Add(span * time.Duration(s*total+i*mixedWorkers+g) / time.Duration(len(plan)*total))
					_, c := f.send(e, st, at)
					f.add(at, c)
				}
				for over := drain.IsZero(); !over; {
					_, c := f.send(e, mixedStep{kind: 'b'}, drain)
					over = c.admitted == 0 || f.add(drain, c)
				}
			}()
		}
	}
	wg.Wait()
}

// prologue has every node, on its own and all at once, admit a few b
// requests from at on, then send a negative hit of up to 1,000,000. Run
// where each node's b entry is fresh (a new window, or a reset), the node
// has then served exactly the j it admitted, so the hit may give back at
// most min(n, j).
func (f *mixedFleet) prologue(rng *rand.Rand, at time.Time) {
	var wg sync.WaitGroup
	for _, e := range f.es {
		j := 1 + rng.IntN(4)
		n := []uint32{1, 3, 50, 4000, 1_000_000}[rng.IntN(5)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			served := 0
			for k := range j {
				_, c := f.send(e, mixedStep{kind: 'b'}, at.Add(time.Duration(k)*time.Millisecond))
				served += c.admitted
			}
			f.send(e, mixedStep{kind: 'n', n: n}, at.Add(time.Duration(j)*time.Millisecond))
			f.add(at, mixedCount{admitted: served, allowance: min(int(n), served)})
		}()
	}
	wg.Wait()
}

// hold holds t's store checks, sends each node perNode {b, t} requests at
// at, and returns once each has taken its unit of b (its t check has
// arrived). Until release is called they wait, holding their units; with
// carry, those units are counted as carried out of at's window.
func (f *mixedFleet) hold(at time.Time, perNode int, carry bool) (release func()) {
	release = sync.OnceFunc(f.store.hold())
	f.held = append(f.held, release)
	// Nothing else is in flight: every other t check has arrived.
	want := f.store.arrived.Load() + int64(perNode*len(f.es))
	for _, e := range f.es {
		for range perNode {
			f.all.Add(1)
			go func() {
				defer f.all.Done()
				resp, _ := f.send(e, mixedStep{kind: 't'}, at)
				if carry && resp != nil && resp.Statuses[0].Code == engine.CodeOK {
					f.add(at, mixedCount{carried: 1})
				}
			}()
		}
	}
	if !testenv.Eventually(func() bool { return f.store.arrived.Load() == want }) {
		release()
		f.t.Fatalf("%d t checks expected, %d arrived", want, f.store.arrived.Load())
	}
	return release
}

// reset runs, at w's 20th second, an equivalent reload on every node, then
// on each node one of the paths that drop its b entry: SIGTERM (Close, and a
// fresh engine in its place), a reload retiring b and restoring it (or
// replacing it by another batch), an idle return, or evictions.
func (f *mixedFleet) reset(rng *rand.Rand, w int, ws time.Time) {
	t := f.t
	for _, c := range f.clocks { // sweeps may fire: legitimate returns too
		c.Set(ws.Add(20 * time.Second))
	}
	for i, e := range f.es {
		f.load(e, f.batch[i])
	}
	for i, path := range rng.Perm(4) {
		e := f.es[i]
		switch path {
		case 0:
			if err := e.Close(bg); err != nil {
				t.Fatalf("window %d: SIGTERM of node %d: %v", w, i, err)
			}
			f.es[i], f.batch[i] = f.start(i), mixedBatch
		case 1: // b retired then restored, or replaced (batch 20 ↔ 16)
			batches := []int{0, f.batch[i]}
			if w%2 == 1 {
				f.batch[i] = mixedBatch + 16 - f.batch[i]
				batches = []int{f.batch[i]}
			}
			for _, batch := range batches {
				f.load(e, batch)
			}
		case 2:
			// Every key of the node was last used by the 16th second: ticks
			// of the sweep from the 26th return them all. Each poll moves
			// the node's clock a second, so no tick is missed.
			c, limit := f.clocks[i], ws.Add(45*time.Second)
			if !testenv.Eventually(func() bool {
				if e.Snapshot()[1].Limiter.Keys == 0 { // rules: t, b
					return true
				}
				if c.Now().Before(limit) {
					c.Advance(time.Second)
				}
				return false
			}) {
				t.Fatalf("window %d: node %d's idle keys were not returned: %+v", w, i, e.Snapshot()[1])
			}
		case 3:
			// Eight new keys, used after every key held: the L1 of one shard
			// of eight evicts them all, b=k included.
			for k := range mixedMaxKeys {
				f.send(e, mixedStep{kind: 'c', n: uint32(100 + w*mixedMaxKeys + k)}, ws.Add(18*time.Second+time.Duration(k)*time.Millisecond))
			}
		}
	}
}

// mixedDraw draws a step: b alone (55%), {b, t} (20%), one of 40 other
// keys (20%), a negative hit of 1 to 3 (5%).
func mixedDraw(rng *rand.Rand) mixedStep {
	switch r := rng.IntN(20); {
	case r >= 19:
		return mixedStep{kind: 'n', n: uint32(1 + rng.IntN(3))}
	case r >= 15:
		return mixedStep{kind: 'c', n: uint32(rng.IntN(40))}
	case r >= 11:
		return mixedStep{kind: 't'}
	}
	return mixedStep{kind: 'b'}
}

// TestMixedCreditReturnsHoldTheLimitPerWindow: four nodes over one Redis,
// eight windows of a minute, every path that gives credits back in each.
// At 0s each node admits a few b then sends a negative hit of up to
// 1,000,000; 1–15s, concurrent b alone, {b, t} (refunded: t is used up),
// other keys (evicting) and negative hits of 1–3; at 16s {b, t} requests
// take units of b and wait on t while, at 20s, each node reloads an
// equivalent policy, then loses its b entry: SIGTERM and a fresh engine, b
// retired and restored or replaced, an idle return, evictions; at 30s the
// 0s prologue again, then the waiting requests are refunded; 31–59s, more
// traffic; at 59.999s a drain. In even windows {b, t} requests also take
// units at 30.5s, refunded only once every node has leased the next
// window's credits. Per window, b admissions less what negative hits may
// give back are at most Limit, and with the units carried out, ≥ 90% of it.
func TestMixedCreditReturnsHoldTheLimitPerWindow(t *testing.T) {
	rs, _ := redisStore(t, redisstore.Options{})
	f := &mixedFleet{t: t, store: &holdStore{Store: rs, marker: "held"}, base: storetest.Timeline().Add(40 * time.Minute)}
	for i := range mixedNodes {
		f.clocks = append(f.clocks, clock.NewFake(f.base))
		f.es = append(f.es, f.start(i))
		f.batch = append(f.batch, mixedBatch)
	}
	t.Cleanup(func() {
		for _, release := range f.held {
			release()
		}
		f.all.Wait() // before the engines close
	})
	if got := decide(t, f.es[0], req("holes", "t=held"), f.base); got.Code != engine.CodeOK {
		t.Fatalf("using up t: %s", codes(got))
	}
	rng := rand.New(rand.NewPCG(6, 60))
	carried := func() {} // releases are idempotent
	for w := range mixedWindows {
		ws := f.base.Add(time.Duration(w) * time.Minute)
		f.prologue(rng, ws)
		carried()
		f.run(rng, 12, ws.Add(time.Second), 14*time.Second, time.Time{})
		held := f.hold(ws.Add(16*time.Second), 2, false)
		f.reset(rng, w, ws)
		f.prologue(rng, ws.Add(30*time.Second))
		if w%2 == 0 {
			// A new hold: these wait for their own release, while the
			// requests held at 16s go on and no other t check is held.
			carried = f.hold(ws.Add(30*time.Second+500*time.Millisecond), 5, true)
		}
		held()
		f.run(rng, 40, ws.Add(31*time.Second), 28*time.Second, ws.Add(time.Minute-time.Millisecond))
	}
	f.all.Wait()

	var over []string
	for w, c := range f.counts {
		net := c.admitted - c.allowance
		t.Logf("window %d: %d b admitted, negative hits may give back %d: %d of Limit %d (%d carried out)", w, c.admitted, c.allowance, net, mixedLimit, c.carried)
		if net > mixedLimit {
			over = append(over, fmt.Sprintf("window %d: %d (%d admitted, %d given back at most)", w, net, c.admitted, c.allowance))
		} else if net+c.carried < mixedLimit*9/10 {
			t.Errorf("window %d: %d of Limit %d, %d carried out: the schedule does not approach the bound", w, net, mixedLimit, c.carried)
		}
	}
	if len(over) > 0 {
		t.Fatalf("in coupled mode, windows admitted more than Limit %d across %d nodes, less what their negative hits could give back (a drain stops there): %s", mixedLimit, mixedNodes, strings.Join(over, "; "))
	}
}
