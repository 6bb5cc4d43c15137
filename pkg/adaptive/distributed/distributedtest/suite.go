// Package distributedtest is the conformance suite of package distributed's
// coordinators: every Coordinator passes RunCoordinator, and Differential
// holds two coordinators to the same answers on one random schedule.
//
// The suites walk a fake timeline: coordinators under test must read the
// now each call passes (a Redis or PostgreSQL coordinator's caller-clock
// option).
package distributedtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// t0 is the suites' timeline origin.
var t0 = time.Unix(1_700_000_000, 0)

var ttl = distributed.Config{LeaseTTL: 2 * time.Second}

// RunCoordinator runs the Coordinator contract against the coordinator
// newCoord returns. Each subtest uses its own gate, so newCoord may return
// one shared coordinator.
func RunCoordinator(t *testing.T, newCoord func(t *testing.T) distributed.Coordinator) {
	cases := []struct {
		name string
		run  func(t *testing.T, c distributed.Coordinator, gate string)
	}{
		{"LoneNodeGetsItsLocalLimit", loneNode},
		{"EqualSplitRotatesTheRemainderInNodeOrder", equalSplit},
		{"AggregateIsMinLowerMedianOrMean", aggregates},
		{"OccupancyCapReservesPeersInflight", occupancyCap},
		{"HandoffReservesTheUnacknowledgedHigh", handoff},
		{"DemandSplitHasAFloorOfOne", demandSplit},
		{"StaleReportChangesNothing", staleReport},
		{"DuplicateLiveNodeIsRefused", duplicateNode},
		{"ExpiredNodesAreEvicted", eviction},
		{"RecreatedRecordNumbersAboveTheEcho", recreated},
		{"LeaveHandsTheShareBack", leave},
		{"BadReportsAreRefused", badReports},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newCoord(t), fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()))
		})
	}
	t.Run("ConcurrentBeatsKeepTheCap", func(t *testing.T) { concurrent(t, newCoord(t)) })
}

// beater sends one node's reports with increasing seq.
type beater struct {
	t    *testing.T
	c    distributed.Coordinator
	gate string
	cfg  distributed.Config
	seq  map[string]uint64
}

func newBeater(t *testing.T, c distributed.Coordinator, gate string, cfg distributed.Config) *beater {
	return &beater{t: t, c: c, gate: gate, cfg: cfg, seq: map[string]uint64{}}
}

// beat reports node's state at now and returns the grant.
func (b *beater) beat(node string, local, inflight int, applied uint64, now time.Time) distributed.Grant {
	b.t.Helper()
	g, err := b.try(distributed.Report{Node: node, Instance: "i-" + node, Local: local, Inflight: inflight, AppliedGen: applied}, now)
	if err != nil {
		b.t.Fatalf("%s: Heartbeat: %v", node, err)
	}
	return g
}

func (b *beater) try(r distributed.Report, now time.Time) (distributed.Grant, error) {
	if r.Seq == 0 {
		b.seq[r.Node]++
		r.Seq = b.seq[r.Node]
	}
	return b.c.Heartbeat(context.Background(), b.gate, r, b.cfg, now)
}

func want(t *testing.T, what string, g distributed.Grant, share, global, live int) {
	t.Helper()
	if g.Share != share || g.Global != global || g.Live != live {
		t.Fatalf("%s: share %d of %d among %d, want %d of %d among %d (%+v)", what, g.Share, g.Global, g.Live, share, global, live, g)
	}
}

func loneNode(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	g := b.beat("a", 7, 0, 0, t0)
	want(t, "first beat", g, 7, 7, 1)
	if g.Gen != 1 || g.Status != distributed.Granted {
		t.Fatalf("first beat: gen %d status %v, want 1 granted", g.Gen, g.Status)
	}
	if g.ExpiresAt != t0.Add(ttl.LeaseTTL).UnixMicro() || g.Now != t0.UnixMicro() {
		t.Fatalf("lease end %d now %d, want %d and %d", g.ExpiresAt, g.Now, t0.Add(ttl.LeaseTTL).UnixMicro(), t0.UnixMicro())
	}
	g = b.beat("a", 9, 3, 1, t0.Add(time.Second))
	want(t, "second beat", g, 9, 9, 1)
	if g.Gen != 2 {
		t.Fatalf("second beat: gen %d, want 2", g.Gen)
	}
}

func equalSplit(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	b.beat("c", 10, 0, 0, t0)
	g := b.beat("c", 10, 0, 1, t0) // c's share 10 is reserved until it beats again
	want(t, "c alone", g, 10, 10, 1)
	g = b.beat("a", 10, 0, 0, t0)
	want(t, "a joins while c holds 10", g, 0, 10, 2)
	g = b.beat("c", 10, 0, 2, t0)
	want(t, "c gives back half", g, 5, 10, 2)
	b.beat("b", 10, 0, 0, t0)
	b.beat("c", 10, 0, 3, t0) // c: 3 of 10 among three
	// The remainder's turn moves one node each lease TTL: ⌊t0 / 2s⌋ mod 3
	// is 1, b's place in nodeId order.
	g = b.beat("a", 10, 0, 1, t0)
	want(t, "a, not its turn", g, 3, 10, 3)
	g = b.beat("b", 10, 0, 1, t0)
	want(t, "b, its turn, takes the remainder", g, 4, 10, 3)
	tm, t1 := t0.Add(1500*time.Millisecond), t0.Add(ttl.LeaseTTL)
	b.beat("a", 10, 0, 2, tm)
	b.beat("c", 10, 0, 4, tm)
	g = b.beat("b", 10, 0, 2, t1)
	want(t, "a lease later, b's turn is over", g, 3, 10, 3)
	g = b.beat("c", 10, 0, 5, t1)
	want(t, "c, its turn, takes the remainder", g, 4, 10, 3)
}

func aggregates(t *testing.T, c distributed.Coordinator, gate string) {
	for _, tc := range []struct {
		agg    distributed.Aggregate
		global int
	}{{distributed.Min, 4}, {distributed.Median, 8}, {distributed.Mean, 15}} {
		cfg := ttl
		cfg.Aggregate = tc.agg
		b := newBeater(t, c, gate+"/"+tc.agg.String(), cfg)
		b.beat("a", 4, 0, 0, t0)
		b.beat("b", 8, 0, 0, t0)
		b.beat("c", 20, 0, 0, t0)
		b.beat("d", 30, 0, 0, t0)
		if g := b.beat("a", 4, 0, 1, t0); g.Global != tc.global {
			t.Fatalf("%v of 4, 8, 20, 30: %d, want %d", tc.agg, g.Global, tc.global)
		}
	}
}

func occupancyCap(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	b.beat("a", 10, 0, 0, t0)
	b.beat("b", 10, 0, 0, t0) // b: 0, a still holds 10
	g := b.beat("a", 10, 8, 1, t0)
	want(t, "a lowered to its half, 8 still in flight", g, 5, 10, 2)
	g = b.beat("b", 10, 0, 1, t0)
	want(t, "b while a has 8 in flight", g, 2, 10, 2)
	g = b.beat("a", 10, 4, 2, t0)
	want(t, "a drains to 4", g, 5, 10, 2)
	g = b.beat("b", 10, 0, 2, t0)
	want(t, "b once a is within its share", g, 5, 10, 2)
}

func handoff(t *testing.T, c distributed.Coordinator, gate string) {
	cfg := ttl
	cfg.Handoff = true
	b := newBeater(t, c, gate, cfg)
	b.beat("a", 10, 0, 0, t0)
	g := b.beat("a", 10, 0, 1, t0) // a applied gen 1: share 10 acknowledged
	b.beat("b", 10, 0, 0, t0)      // b: 0
	g = b.beat("a", 10, 0, g.Gen-1, t0)
	want(t, "a lowered to 5, its report one generation behind", g, 5, 10, 2)
	g = b.beat("b", 10, 0, 1, t0)
	want(t, "b while a has not acknowledged 5: a may still admit 10", g, 0, 10, 2)
	ga := b.beat("a", 10, 0, 3, t0) // a acknowledges gen 3 (share 5), gets gen 4
	want(t, "a acknowledges", ga, 5, 10, 2)
	g = b.beat("b", 10, 0, 2, t0)
	want(t, "b once a acknowledged: a's 5 is the reserve", g, 5, 10, 2)

	// Without handoff the same timeline grants b 5 while a may still be
	// admitting under 10: the hole handoff closes.
	b = newBeater(t, c, gate+"/off", ttl)
	b.beat("a", 10, 0, 0, t0)
	b.beat("a", 10, 0, 1, t0)
	b.beat("b", 10, 0, 0, t0)
	b.beat("a", 10, 0, 1, t0)
	g = b.beat("b", 10, 0, 1, t0)
	want(t, "b without handoff", g, 5, 10, 2)
}

func demandSplit(t *testing.T, c distributed.Coordinator, gate string) {
	cfg := ttl
	cfg.Split = distributed.Demand
	b := newBeater(t, c, gate, cfg)
	rep := func(node string, demand int) distributed.Grant {
		g, err := b.try(distributed.Report{Node: node, Instance: "i", Local: 10, Demand: demand}, t0)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	rep("hot", 90)
	rep("idle", 0)
	if g := rep("hot", 90); g.Share != 9 {
		t.Fatalf("hot with 90 of 90 demand: share %d, want 9 (idle keeps its floor of 1)", g.Share)
	}
	if g := rep("idle", 0); g.Share != 1 {
		t.Fatalf("idle: share %d, want the floor of 1", g.Share)
	}
}

func staleReport(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	b.try(distributed.Report{Node: "a", Instance: "i", Seq: 5, Local: 10}, t0)
	g, err := b.try(distributed.Report{Node: "a", Instance: "i", Seq: 5, Local: 1, Inflight: 9}, t0.Add(time.Second))
	if err != nil || g.Status != distributed.Stale || g.Share != 10 || g.Gen != 1 {
		t.Fatalf("a repeated seq: %+v, %v; want stale with the recorded share 10 at gen 1", g, err)
	}
	g, err = b.try(distributed.Report{Node: "a", Instance: "i", Seq: 6, Local: 10, AppliedGen: 1}, t0.Add(time.Second))
	if err != nil || g.Status != distributed.Granted || g.Gen != 2 {
		t.Fatalf("the next seq: %+v, %v; want granted at gen 2", g, err)
	}
}

func duplicateNode(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	if _, err := b.try(distributed.Report{Node: "a", Instance: "first", Seq: 1, Local: 10}, t0); err != nil {
		t.Fatal(err)
	}
	_, err := b.try(distributed.Report{Node: "a", Instance: "second", Seq: 9, Local: 10}, t0.Add(time.Second))
	if !errors.Is(err, distributed.ErrDuplicateNode) {
		t.Fatalf("a second instance of a live node: %v, want ErrDuplicateNode", err)
	}
	g, err := b.try(distributed.Report{Node: "a", Instance: "first", Seq: 2, Local: 10, AppliedGen: 1}, t0.Add(time.Second))
	if err != nil || g.Gen != 2 {
		t.Fatalf("the first instance after the refusal: %+v, %v; want its record untouched (gen 2)", g, err)
	}
	// Once the record has expired, a new instance (a restart) takes over.
	g, err = b.try(distributed.Report{Node: "a", Instance: "second", Seq: 1, Local: 10}, t0.Add(time.Second+ttl.LeaseTTL))
	if err != nil || g.Gen != 1 || g.Share != 10 {
		t.Fatalf("a new instance after expiry: %+v, %v; want a fresh record at gen 1", g, err)
	}
}

func eviction(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	b.beat("a", 10, 0, 0, t0)
	b.beat("b", 10, 0, 0, t0.Add(time.Second))
	// At t0+2s a's lease has ended: b alone, and b may take it all.
	g := b.beat("b", 10, 0, 1, t0.Add(ttl.LeaseTTL))
	want(t, "b after a's lease ended", g, 10, 10, 1)
	// The reporter survives its own expiry.
	g = b.beat("b", 10, 0, 2, t0.Add(time.Hour))
	want(t, "b long after its own lease", g, 10, 10, 1)
}

// recreated: a node whose record was evicted comes back echoing the
// generation it applied; the new record numbers on above it, and the echo
// acknowledges none of its generations.
func recreated(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, distributed.Config{LeaseTTL: 2 * time.Second, Handoff: true})
	var gen uint64
	for range 3 {
		gen = b.beat("a", 10, 0, gen, t0).Gen
	}
	b.beat("b", 10, 0, 0, t0.Add(3*time.Second)) // a's lease has ended: evicted
	g := b.beat("a", 10, 2, gen, t0.Add(3*time.Second))
	if g.Gen != gen+1 || g.Live != 2 {
		t.Fatalf("a back, echoing generation %d: %+v, want generation %d among 2", gen, g, gen+1)
	}
	// The answer was lost: a echoes its old generation again. The share of
	// the lost generation stays reserved (High), so b, asking for it all,
	// gets the ceiling less max(that share, a's in flight).
	lost := g.Share
	again := b.beat("a", 10, 0, gen, t0.Add(3*time.Second))
	if again.Gen != gen+2 {
		t.Fatalf("a again: %+v, want generation %d", again, gen+2)
	}
	g = b.beat("b", 10, 0, 1, t0.Add(3*time.Second))
	if want := 10 - max(lost, again.Share); g.Share > want {
		t.Fatalf("b after a's unacknowledged grants of %d and %d: share %d, want ≤ %d", lost, again.Share, g.Share, want)
	}
}

// leave: a node's instance leaves and its share is the others' at their
// next beat; another instance's record, or none, is left alone.
func leave(t *testing.T, c distributed.Coordinator, gate string) {
	lv, ok := c.(distributed.Leaver)
	if !ok {
		t.Fatalf("%T does not implement distributed.Leaver", c)
	}
	b := newBeater(t, c, gate, ttl)
	b.beat("a", 10, 0, 0, t0) // 10: alone
	b.beat("b", 10, 0, 0, t0) // 0: a holds it all
	b.beat("a", 10, 0, 1, t0) // 5
	want(t, "b with a", b.beat("b", 10, 0, 1, t0), 5, 10, 2)
	if removed, err := lv.Leave(context.Background(), gate, "a", "another instance"); removed || err != nil {
		t.Fatalf("another instance's leave: removed %v, %v; want nothing removed", removed, err)
	}
	if removed, err := lv.Leave(context.Background(), gate, "a", "i-a"); !removed || err != nil {
		t.Fatalf("a's leave: removed %v, %v; want its record removed", removed, err)
	}
	if removed, err := lv.Leave(context.Background(), gate, "a", "i-a"); removed || err != nil {
		t.Fatalf("a's second leave: removed %v, %v; want nothing to remove", removed, err)
	}
	if removed, err := lv.Leave(context.Background(), gate+"/never", "a", "i-a"); removed || err != nil {
		t.Fatalf("leaving a gate never beaten: removed %v, %v", removed, err)
	}
	want(t, "b after a left, within a's lease", b.beat("b", 10, 0, 2, t0.Add(time.Millisecond)), 10, 10, 1)
}

func badReports(t *testing.T, c distributed.Coordinator, gate string) {
	b := newBeater(t, c, gate, ttl)
	for _, r := range []distributed.Report{
		{Instance: "i", Seq: 1, Local: 1},
		{Node: "a", Instance: "i", Seq: 1, Local: 0},
		{Node: "a", Instance: "i", Seq: 1, Local: 1, Inflight: -1},
		{Node: "a", Instance: "i", Seq: 0, Local: 1},
		{Node: "a", Instance: "i", Seq: 1, Local: 1, AppliedGen: distributed.MaxGen + 1},
	} {
		if _, err := b.c.Heartbeat(context.Background(), b.gate, r, b.cfg, t0); !errors.Is(err, distributed.ErrBadReport) {
			t.Fatalf("%+v: %v, want ErrBadReport", r, err)
		}
	}
	if _, err := c.Heartbeat(context.Background(), gate, distributed.Report{Node: "a", Instance: "i", Seq: 1, Local: 1}, distributed.Config{}, t0); err == nil {
		t.Fatal("a zero lease TTL accepted")
	}
}

// concurrent beats 8 nodes at once, 50 times each, with random local limits
// and in-flight counts within their shares: every grant keeps Σ share ≤
// L_global, the reporter's share plus the others' reserves.
func concurrent(t *testing.T, c distributed.Coordinator) {
	gate := fmt.Sprintf("concurrent/%d", time.Now().UnixNano())
	cfg := distributed.Config{LeaseTTL: time.Hour, Handoff: true}
	var mu sync.Mutex
	shares := map[string]int{}
	var wg sync.WaitGroup
	for n := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", n)
			var applied uint64
			var share int
			for seq := uint64(1); seq <= 50; seq++ {
				g, err := c.Heartbeat(context.Background(), gate, distributed.Report{Node: node, Instance: "i", Seq: seq,
					Local: 40, Inflight: share / 2, AppliedGen: applied}, cfg, t0)
				if err != nil {
					t.Errorf("%s: %v", node, err)
					return
				}
				applied, share = g.Gen, g.Share
				mu.Lock()
				shares[node] = share
				var sum int
				for _, s := range shares {
					sum += s
				}
				mu.Unlock()
				if sum > 40 {
					t.Errorf("Σ share %d > L_global 40 after %s's beat", sum, node)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Differential drives a and b with the same random schedule of seed —
// joins, restarts, stale and duplicate reports, lagging acknowledgements,
// leases running out — and fails at the first step they answer differently.
func Differential(t *testing.T, a, b distributed.Coordinator, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 99))
	gate := fmt.Sprintf("differential/%d/%d", seed, time.Now().UnixNano())
	type node struct {
		instance string
		seq, gen uint64
	}
	nodes := map[string]*node{}
	now := t0
	for step := range steps {
		cfg := distributed.Config{LeaseTTL: time.Duration(1+r.IntN(3)) * time.Second,
			Aggregate: distributed.Aggregate(r.IntN(3)), Split: distributed.Split(r.IntN(2)), Handoff: r.IntN(2) == 0}
		now = now.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
		name := fmt.Sprintf("n%d", r.IntN(5))
		n := nodes[name]
		if n == nil || r.IntN(20) == 0 {
			n = &node{instance: fmt.Sprintf("i%d", r.IntN(3))}
			nodes[name] = n
		}
		rep := distributed.Report{Node: name, Instance: n.instance, Local: 1 + r.IntN(20),
			Inflight: r.IntN(12), Demand: r.IntN(30), AppliedGen: n.gen}
		switch r.IntN(10) {
		case 0:
			rep.Seq = n.seq // stale
		case 1:
			rep.AppliedGen = n.gen - min(n.gen, 1) // a lagging acknowledgement
		default:
			n.seq++
			rep.Seq = n.seq
		}
		ga, erra := a.Heartbeat(context.Background(), gate, rep, cfg, now)
		gb, errb := b.Heartbeat(context.Background(), gate, rep, cfg, now)
		if (erra == nil) != (errb == nil) || (erra != nil && !sameKind(erra, errb)) || ga != gb {
			t.Fatalf("step %d, %+v at %v under %+v:\n a: %+v, %v\n b: %+v, %v", step, rep, now, cfg, ga, erra, gb, errb)
		}
		if erra == nil && ga.Gen > n.gen {
			n.gen = ga.Gen
		}
	}
}

func sameKind(a, b error) bool {
	for _, k := range []error{distributed.ErrDuplicateNode, distributed.ErrBadReport} {
		if errors.Is(a, k) != errors.Is(b, k) {
			return false
		}
	}
	return true
}
