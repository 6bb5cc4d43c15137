package rediscoord_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// The outage fleet: three nodes whose local limits are all 12, so L_global
// is 12 and each node's equal share 4; requests last outageRequest.
const (
	outageLocal     = 12
	outageHeartbeat = 50 * time.Millisecond
	outageLease     = 300 * time.Millisecond
	outageRequest   = 10 * time.Millisecond
)

// fixedLocal is a Controller whose limit never moves.
type fixedLocal int

func (l fixedLocal) Observe(time.Time, adaptive.Sample) int { return int(l) }
func (l fixedLocal) Limit() int                             { return int(l) }
func (l fixedLocal) Name() string                           { return "fixed" }

// admission is one request a node admitted, at its node's clock reading.
type admission struct {
	node     int
	at       time.Time
	inflight int // the node's in flight with it
	total    int // the fleet's in flight with it
}

// outageFleet runs three Nodes on the real clock, each reaching one Redis
// through its own toxiproxy, each with traffic that keeps it at its ceiling.
type outageFleet struct {
	t       *testing.T
	nodes   []*distributed.Node
	proxies []*testenv.Proxy

	mu         sync.Mutex
	admissions []admission
	inflight   []int
	total      int
}

func startOutageFleet(t *testing.T, configure func(i int, c *distributed.NodeConfig)) *outageFleet {
	t.Helper()
	r := testenv.StartRedis(t)
	f := &outageFleet{t: t, inflight: make([]int, 3)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	gate := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
	for i := range 3 {
		p := testenv.StartProxy(t, r.Addr)
		rc := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
			DialTimeout: 100 * time.Millisecond, ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { rc.Close() })
		coord, err := rediscoord.New(rc, rediscoord.Options{ServerTime: true, Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		g, err := adaptive.NewGate(adaptive.GateConfig{Controller: fixedLocal(outageLocal)})
		if err != nil {
			t.Fatal(err)
		}
		c := distributed.NodeConfig{Node: fmt.Sprintf("n%d", i), Gate: gate, Coordinator: coord,
			Fleet: distributed.Config{LeaseTTL: outageLease, Handoff: true}, Heartbeat: outageHeartbeat}
		configure(i, &c)
		n, err := distributed.NewNode(g, c)
		if err != nil {
			t.Fatal(err)
		}
		f.nodes, f.proxies = append(f.nodes, n), append(f.proxies, p)
		wg.Add(2)
		go func() { defer wg.Done(); n.Run(ctx) }()
		go func() { defer wg.Done(); f.traffic(ctx, i, n) }()
	}
	f.waitShares(4, 4, 4)
	return f
}

// traffic keeps node i, n, at its ceiling: every millisecond it ends the
// requests older than outageRequest and admits until refused.
func (f *outageFleet) traffic(ctx context.Context, i int, n *distributed.Node) {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	type held struct {
		l  distributed.Lease
		at time.Time
	}
	var leases []held
	for {
		select {
		case <-ctx.Done():
			for _, h := range leases {
				h.l.Release(time.Now(), adaptive.OK)
			}
			return
		case <-tick.C:
		}
		now := time.Now()
		for len(leases) > 0 && now.Sub(leases[0].at) >= outageRequest {
			f.mu.Lock() // counted down before the gate frees the slot
			f.inflight[i]--
			f.total--
			f.mu.Unlock()
			leases[0].l.Release(now, adaptive.OK)
			leases = leases[1:]
		}
		for {
			now := time.Now()
			f.mu.Lock() // the count and the admission are one step for the fleet's sum
			l, ok := n.TryAcquire(now)
			if ok {
				f.inflight[i]++
				f.total++
				f.admissions = append(f.admissions, admission{i, now, f.inflight[i], f.total})
			}
			f.mu.Unlock()
			if !ok {
				break
			}
			leases = append(leases, held{l, now})
		}
	}
}

// waitShares waits until every node runs under a live grant of the given
// shares; a node whose share is -1 is not looked at.
func (f *outageFleet) waitShares(want ...int) {
	f.t.Helper()
	ok := testenv.Eventually(func() bool {
		for i, n := range f.nodes {
			if want[i] < 0 {
				continue
			}
			if st := n.Stats(time.Now()); st.Mode != distributed.ModeGranted || st.Share != want[i] {
				return false
			}
		}
		return true
	})
	if !ok {
		f.t.Fatalf("shares never became %v: %v", want, f.describe())
	}
}

func (f *outageFleet) describe() string {
	var s string
	for _, n := range f.nodes {
		st := n.Stats(time.Now())
		s += fmt.Sprintf(" %s: %v share %d ceiling %d in flight %d errors %d;", st.Node, st.Mode, st.Share, st.Ceiling, st.Inflight, st.Errors)
	}
	return s
}

// cut blackholes node 0's path to Redis both ways and returns the lease
// end it is left with, once two beats have failed: no grant is on its way
// any more, so the lease end is final.
func (f *outageFleet) cut() time.Time {
	f.t.Helper()
	a := f.nodes[0]
	f.proxies[0].Blackhole("upstream")
	f.proxies[0].Blackhole("downstream")
	errs := a.Stats(time.Now()).Errors
	if !testenv.Eventually(func() bool { return a.Stats(time.Now()).Errors >= errs+2 }) {
		f.t.Fatalf("no failed beat after the cut: %v", f.describe())
	}
	return a.Stats(time.Now()).LeaseEnd
}

// since returns node i's admissions from from on, and the most it had in
// flight among them.
func (f *outageFleet) since(i int, from time.Time) (n int, most int, last time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.admissions {
		if a.node == i && !a.at.Before(from) {
			n, most, last = n+1, max(most, a.inflight), a.at
		}
	}
	return n, most, last
}

// waitMode waits until node 0 is in mode m.
func (f *outageFleet) waitMode(m distributed.Mode) time.Time {
	f.t.Helper()
	if !testenv.Eventually(func() bool { return f.nodes[0].Stats(time.Now()).Mode == m }) {
		f.t.Fatalf("node 0 never %v: %v", m, f.describe())
	}
	return time.Now()
}

// TestOutageKeepLastShare: a node cut off from Redis keeps admitting under
// its last share (4) until its lease ends, and after it admits nothing;
// its record expires at Redis and the others take its share (6 each);
// healed, it rejoins and the shares go back to 4 each.
func TestOutageKeepLastShare(t *testing.T) {
	f := startOutageFleet(t, func(int, *distributed.NodeConfig) {})
	cutAt := time.Now()
	end := f.cut()
	lapsed := f.waitMode(distributed.ModeLapsed)
	f.waitShares(-1, 6, 6)
	n, most, last := f.since(0, cutAt)
	t.Logf("after the cut: lease end %v, lapsed %v; %d admissions while holding, at most %d in flight",
		end.Sub(cutAt).Round(time.Millisecond), lapsed.Sub(cutAt).Round(time.Millisecond), n, most)
	if n == 0 {
		t.Error("no admission while holding the last share")
	}
	if most > 4 {
		t.Errorf("%d in flight while holding a share of 4", most)
	}
	if !last.Before(end) {
		t.Errorf("admitted at %v, at or after the lease end %v", last, end)
	}
	// Past the lease end, nothing: watched until the survivors hold its share.
	if n, _, last := f.since(0, end); n > 0 {
		t.Errorf("%d admissions after the lease end (the last %v after it)", n, last.Sub(end))
	}
	f.proxies[0].Heal()
	f.waitShares(4, 4, 4)
}

// TestOutageStaticShare: under StaticShare(2) a node cut off from Redis
// admits up to 2, from its first failed beat on; healed, it goes back to
// its grant.
func TestOutageStaticShare(t *testing.T) {
	f := startOutageFleet(t, func(i int, c *distributed.NodeConfig) { c.Outage = distributed.StaticShare(2) })
	f.cut()
	static := f.waitMode(distributed.ModeStatic)
	if !testenv.Eventually(func() bool { n, _, _ := f.since(0, static); return n >= 20 }) {
		t.Fatalf("no admissions under the static share: %v", f.describe())
	}
	if _, most, _ := f.since(0, static); most != 2 {
		t.Errorf("at most %d in flight under StaticShare(2), want 2", most)
	}
	f.proxies[0].Heal()
	f.waitShares(4, 4, 4)
}

// TestOutageSelfFence: with self-fencing (margin 60 ms, longer than any
// request), a node cut off from Redis admits nothing from its lease end
// less the margin, calls OnFenced once, and its requests have ended before
// its record expires: the fleet's in flight never exceeds L_global (12),
// also while the others take its share. Healed, it is unfenced and
// rejoins.
func TestOutageSelfFence(t *testing.T) {
	const margin = 60 * time.Millisecond
	var fenced atomic.Int32
	f := startOutageFleet(t, func(i int, c *distributed.NodeConfig) {
		c.SelfFence, c.FenceMargin = true, margin
		if i == 0 {
			c.OnFenced = func() { fenced.Add(1) }
		}
	})
	cutAt := time.Now()
	end := f.cut()
	fence := end.Add(-margin)
	f.waitMode(distributed.ModeFenced)
	f.waitShares(-1, 6, 6)
	if n, _, last := f.since(0, fence); n > 0 {
		t.Errorf("%d admissions at or after the fence time (the last %v after it)", n, last.Sub(fence))
	}
	if got := fenced.Load(); got != 1 {
		t.Errorf("OnFenced called %d times in one episode, want 1", got)
	}
	f.mu.Lock()
	most := 0
	for _, a := range f.admissions {
		most = max(most, a.total)
	}
	f.mu.Unlock()
	if most > outageLocal {
		t.Errorf("the fleet had %d in flight, above L_global %d", most, outageLocal)
	}
	t.Logf("fence %v after the cut; the fleet's most in flight %d (L_global %d)", fence.Sub(cutAt).Round(time.Millisecond), most, outageLocal)
	f.proxies[0].Heal()
	f.waitShares(4, 4, 4)
}
