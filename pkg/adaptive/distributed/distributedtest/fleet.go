package distributedtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Fleet is one random fleet RunFleet drives.
type Fleet struct {
	Seed  uint64
	Steps int
	// Nodes is the most nodes alive at once.
	Nodes int
	// Handoff is the fleet's acknowledged handoff.
	Handoff bool
	// Vary moves the nodes' local limits at random; otherwise every node's
	// L_local is one constant L, and so is L_global.
	Vary bool
	// Records, if set, returns the coordinator's records of a gate: after
	// each heartbeat it processes they must be a distributed.Memory's fed
	// the same heartbeats.
	Records func(gate string) ([]distributed.Record, error)
}

// FleetStats counts what a RunFleet run exercised, so callers can check
// over many seeds that the schedules reached what they are meant to.
type FleetStats struct {
	Admitted, Applied, Reordered, Lost, Duplicates, Crashes, Leaves, Joins int
	// TakeOvers and Drains count reloads: a node taken over by a new one
	// (Node.TakeOver), a node drained and then left (Node.Drain).
	TakeOvers, Drains int
	// Overshoot is the most Σ in flight exceeded L (constant L only).
	Overshoot int
}

// MaxLocal bounds the nodes' local limits in RunFleet.
const MaxLocal = 12

// Add adds o's counts to s, and keeps the larger overshoot.
func (s *FleetStats) Add(o FleetStats) {
	s.Admitted += o.Admitted
	s.Applied += o.Applied
	s.Reordered += o.Reordered
	s.Lost += o.Lost
	s.Duplicates += o.Duplicates
	s.Crashes += o.Crashes
	s.Leaves += o.Leaves
	s.Joins += o.Joins
	s.TakeOvers += o.TakeOvers
	s.Drains += o.Drains
	s.Overshoot = max(s.Overshoot, o.Overshoot)
}

// RunFleets runs RunFleet on c for seeds 0..seeds-1 with every combination
// of Handoff and Vary, and checks that the schedules reached what they
// exist for: reordered and lost replies, crashes, leaves, joins, take-overs
// and drains, and,
// without Handoff, Σ in flight above L (the residual handoff closes).
func RunFleets(t *testing.T, c distributed.Coordinator, seeds uint64, records func(gate string) ([]distributed.Record, error)) {
	t.Helper()
	for _, handoff := range []bool{false, true} {
		var total FleetStats
		for _, vary := range []bool{false, true} {
			for seed := range seeds {
				total.Add(RunFleet(t, c, Fleet{Seed: seed, Steps: 600, Nodes: 4, Handoff: handoff, Vary: vary, Records: records}))
			}
		}
		t.Logf("handoff %v: %+v", handoff, total)
		if total.Admitted == 0 || total.Reordered == 0 || total.Lost == 0 || total.Duplicates == 0 ||
			total.Crashes == 0 || total.Leaves == 0 || total.Joins == 0 || total.TakeOvers == 0 || total.Drains == 0 {
			t.Errorf("handoff %v: the schedules missed a kind of event: %+v", handoff, total)
		}
		if !handoff && total.Overshoot == 0 {
			t.Errorf("without handoff, Σ in flight never exceeded L: the schedules never reached the state handoff exists for")
		}
	}
}

// The fleet's timings: a lease of two heartbeats, and requests that each end
// within requestMax of their admission, fenced out that long before a lease
// ends (the seed's least safe margin D + R, with D = 0: one clock).
const (
	fleetHeartbeat = time.Second
	fleetLease     = 2 * fleetHeartbeat
	requestMax     = 300 * time.Millisecond
)

// RunFleet drives real distributed.Nodes of one gate on coordinator c with
// the random schedule of f.Seed: nodes join, beat, admit, release, crash (a
// new process under the same nodeId, refused while the old record lives,
// whose requests run to their end), leave, are rebuilt by a reload (a new
// node in the process takes the old one over, whose requests and
// heartbeats run on) or dropped by one (the node drains, beating on, and
// leaves once its requests have ended), and change L_local; time moves
// on, so leases run out and records are evicted; heartbeats overlap, reach
// the coordinator in any order or not at all, and their replies come back
// in any order or are lost. The coordinator processes a heartbeat at the
// instant the schedule picks, on that instant's clock, as one under
// ServerTime would (the nodes' and the coordinator's clocks are one).
//
// Every node self-fences with a margin of the longest request, so no
// request outlives its node's lease. After every step:
//   - every node admitting has a live record of its instance, and admits
//     below the highest share that record says was issued to it
//     (max(High, Share)): it never admits under a share the coordinator
//     does not count;
//   - with L constant, Σ share over the records ≤ L, and with Handoff, Σ in
//     flight ≤ L, over every request of every node, crashed ones included;
//   - c answers every heartbeat as a distributed.Memory fed the same ones
//     (grant, or kind of error), and, with f.Records, holds its records.
func RunFleet(t *testing.T, c distributed.Coordinator, f Fleet) FleetStats {
	t.Helper()
	r := rand.New(rand.NewPCG(f.Seed, 13))
	gate := fmt.Sprintf("fleet/%d/%d", f.Seed, time.Now().UnixNano())
	ref := distributed.NewMemory()
	s := &scheduled{t: t, c: c, ref: ref, calls: make(chan *call)}
	cfg := distributed.Config{LeaseTTL: fleetLease, Handoff: f.Handoff,
		Aggregate: distributed.Aggregate(r.IntN(3)), Split: distributed.Split(r.IntN(2))}
	name := fmt.Sprintf("seed %d (%+v, %v)", f.Seed, cfg, map[bool]string{true: "varying L", false: "constant L"}[f.Vary])
	L := 1 + r.IntN(MaxLocal)

	type request struct {
		lease distributed.Lease
		m     *member
		ends  time.Time // the latest it can end: admission + requestMax
	}
	var (
		st       FleetStats
		now      = t0
		alive    []*member
		calls    []*call
		requests []request
		nextID   int
	)
	build := func(id string) *member {
		m := &member{id: id, limit: &fixedLimit{}}
		m.limit.v.Store(int64(L))
		if f.Vary {
			m.limit.v.Store(int64(1 + r.IntN(MaxLocal)))
		}
		g, err := adaptive.NewGate(adaptive.GateConfig{Controller: m.limit})
		if err != nil {
			t.Fatal(err)
		}
		m.node, err = distributed.NewNode(g, distributed.NodeConfig{Node: id, Gate: gate, Coordinator: s, Fleet: cfg,
			Heartbeat: fleetHeartbeat, SelfFence: true, FenceMargin: requestMax})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	join := func(id string) {
		alive = append(alive, build(id))
	}
	end := func(i int, at time.Time) {
		requests[i].lease.Release(at, adaptive.OK)
		requests = slices.Delete(requests, i, i+1)
	}
	// answer delivers calls[i]'s reply and waits for the node to take it.
	answer := func(i int, lost bool) {
		k := calls[i]
		calls = slices.Delete(calls, i, i+1)
		res := k.res
		if lost || !k.processed {
			res = result{err: errLost}
			st.Lost++
		}
		for _, o := range calls {
			if o.m == k.m && o.rep.Seq < k.rep.Seq && o.processed {
				st.Reordered++ // an earlier heartbeat's reply is still out
				break
			}
		}
		before := k.m.node.Stats(now).AppliedGen
		k.reply <- res
		<-k.done
		if k.m.node.Stats(now).AppliedGen != before {
			st.Applied++
		}
		k.m.pending--
	}
	for range 1 + r.IntN(f.Nodes) {
		join(fmt.Sprintf("n%d", nextID))
		nextID++
	}
	for step := range f.Steps {
		var m *member
		if len(alive) > 0 {
			m = alive[r.IntN(len(alive))]
		}
		switch op := r.IntN(1000); {
		case op < 200: // a heartbeat leaves the node
			if m == nil || m.pending >= 3 {
				break
			}
			done := make(chan struct{})
			sent := now
			go func() {
				defer close(done)
				m.node.Beat(context.Background(), sent) // its reply is checked where the schedule delivers it
			}()
			k := <-s.calls
			k.m, k.done = m, done
			m.pending++
			calls = append(calls, k)
		case op < 360: // the coordinator processes a heartbeat, now
			var open []int
			for i, k := range calls {
				if !k.processed {
					open = append(open, i)
				}
			}
			if len(open) == 0 {
				break
			}
			k := calls[open[r.IntN(len(open))]]
			k.processed = true
			k.res.g, k.res.err = c.Heartbeat(context.Background(), gate, k.rep, k.cfg, now)
			wg, werr := ref.Heartbeat(context.Background(), gate, k.rep, k.cfg, now)
			if (k.res.err == nil) != (werr == nil) || (werr != nil && !sameKind(k.res.err, werr)) || k.res.g != wg {
				t.Fatalf("%s step %d: %+v at %v:\n got  %+v, %v\n want %+v, %v", name, step, k.rep, now, k.res.g, k.res.err, wg, werr)
			}
			if errors.Is(werr, distributed.ErrDuplicateNode) {
				st.Duplicates++
			} else if werr != nil {
				t.Fatalf("%s step %d: %+v: %v", name, step, k.rep, werr)
			}
			if f.Records != nil {
				got, err := f.Records(gate)
				if err != nil {
					t.Fatal(err)
				}
				if want := ref.Records(gate); !slices.Equal(got, want) {
					t.Fatalf("%s step %d, after %+v at %v:\n stored %+v\n want   %+v", name, step, k.rep, now, got, want)
				}
			}
		case op < 520: // a reply comes back, or is lost
			var out []int
			for i, k := range calls {
				if k.processed {
					out = append(out, i)
				}
			}
			if len(out) > 0 {
				answer(out[r.IntN(len(out))], r.IntN(8) == 0)
			}
		case op < 540: // a heartbeat is lost on its way
			if len(calls) > 0 {
				answer(r.IntN(len(calls)), true)
			}
		case op < 700: // admissions: one, or as many as the node takes
			if m == nil {
				break
			}
			for range 1 + r.IntN(2)*MaxLocal {
				l, ok := m.node.TryAcquire(now)
				if !ok {
					break
				}
				requests = append(requests, request{l, m, now.Add(requestMax)})
				st.Admitted++
			}
		case op < 860: // a request ends
			if len(requests) > 0 {
				end(r.IntN(len(requests)), now)
			}
		case op < 940: // time moves on; requests end by their deadline
			now = now.Add(time.Duration(r.IntN(int(fleetLease/time.Millisecond/10))) * time.Millisecond)
			for i := len(requests) - 1; i >= 0; i-- {
				if !now.Before(requests[i].ends) {
					end(i, requests[i].ends)
				}
			}
		case op < 943: // a crash: a new process under the node's id
			if m == nil {
				break
			}
			alive = slices.DeleteFunc(alive, func(o *member) bool { return o == m })
			join(m.id) // the old process's requests run on to their ends
			st.Crashes++
		case op < 946: // a node leaves: its requests are ended first
			if m == nil {
				break
			}
			for i := len(requests) - 1; i >= 0; i-- {
				if requests[i].m == m {
					end(i, now)
				}
			}
			if _, err := m.node.Leave(context.Background()); err != nil {
				t.Fatalf("%s step %d: %s leaving: %v", name, step, m.id, err)
			}
			alive = slices.DeleteFunc(alive, func(o *member) bool { return o == m })
			st.Leaves++
		case op < 949: // a reload rebuilds the gate: a new node takes over
			if m == nil {
				break
			}
			next := build(m.id)
			if err := next.node.TakeOver(m.node); err != nil {
				t.Fatalf("%s step %d: %s taking over: %v", name, step, m.id, err)
			}
			alive[slices.Index(alive, m)] = next // m's requests and beats run on
			for i := range requests {
				if requests[i].m == m {
					requests[i].m = next // counted by next now
				}
			}
			st.TakeOvers++
		case op < 952: // a reload drops the gate: the node drains
			if m == nil || m.drained != nil {
				break
			}
			m.drained = m.node.Drain()
			st.Drains++
		case op < 970: // a node joins
			if len(alive) < f.Nodes {
				join(fmt.Sprintf("n%d", nextID))
				nextID++
				st.Joins++
			}
		default: // L_local moves; the gate takes it at its next release
			if f.Vary && m != nil {
				m.limit.v.Store(int64(1 + r.IntN(MaxLocal)))
			}
		}
		for _, m := range slices.Clone(alive) { // drained nodes leave
			if m.drained == nil {
				continue
			}
			select {
			case <-m.drained:
			default:
				continue
			}
			if _, err := m.node.Leave(context.Background()); err != nil {
				t.Fatalf("%s step %d: %s leaving once drained: %v", name, step, m.id, err)
			}
			alive = slices.DeleteFunc(alive, func(o *member) bool { return o == m })
		}
		checkFleet(t, fmt.Sprintf("%s step %d", name, step), ref.Records(gate), now, f, L, len(requests), &st, alive)
	}
	for len(calls) > 0 { // free the beats still waiting
		answer(0, true)
	}
	return st
}

// checkFleet checks RunFleet's invariants on the reference records recs at
// now, with inflight requests outstanding and the alive nodes.
func checkFleet(t *testing.T, at string, recs []distributed.Record, now time.Time, f Fleet, L, inflight int, st *FleetStats, alive []*member) {
	t.Helper()
	for _, m := range alive {
		id, instance, ceiling := m.id, m.node.Instance(), m.node.Stats(now).Ceiling
		if ceiling == 0 {
			continue
		}
		i := slices.IndexFunc(recs, func(r distributed.Record) bool { return r.Node == id && r.Instance == instance })
		switch {
		case i < 0:
			t.Fatalf("%s: %s admits up to %d with no record", at, id, ceiling)
		case recs[i].ExpiresAt <= now.UnixMicro():
			t.Fatalf("%s: %s admits up to %d past its record's expiry (%+v)", at, id, ceiling, recs[i])
		case ceiling > max(recs[i].High, recs[i].Share):
			t.Fatalf("%s: %s admits up to %d, above any share its record says was issued (%+v)", at, id, ceiling, recs[i])
		}
	}
	if f.Vary {
		return
	}
	var sum int
	for _, r := range recs {
		sum += r.Share
	}
	if sum > L {
		t.Fatalf("%s: Σ share %d > L %d: %+v", at, sum, L, recs)
	}
	st.Overshoot = max(st.Overshoot, inflight-L)
	if f.Handoff && inflight > L {
		t.Fatalf("%s: Σ in flight %d > L %d with acknowledged handoff: %+v", at, inflight, L, recs)
	}
}

// member is a node process of RunFleet's fleet.
type member struct {
	id      string
	limit   *fixedLimit
	node    *distributed.Node
	pending int // its heartbeats not yet answered
	// drained is Drain's channel once a reload dropped the gate.
	drained <-chan struct{}
}

// scheduled is the Coordinator RunFleet's nodes call: each heartbeat waits
// until the schedule answers it. A Leave goes through at once, to the
// coordinator under test and the reference alike.
type scheduled struct {
	t     *testing.T
	c     distributed.Coordinator
	ref   *distributed.Memory
	calls chan *call
}

type call struct {
	rep       distributed.Report
	cfg       distributed.Config
	reply     chan result
	processed bool
	res       result
	m         *member       // the node that sent it
	done      chan struct{} // closed when the node's Beat has returned
}

type result struct {
	g   distributed.Grant
	err error
}

var errLost = errors.New("distributedtest: heartbeat or reply lost")

func (s *scheduled) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	k := &call{rep: rep, cfg: cfg, reply: make(chan result, 1)}
	s.calls <- k
	res := <-k.reply
	return res.g, res.err
}

// Leave implements distributed.Leaver.
func (s *scheduled) Leave(ctx context.Context, gate, node, instance string) (bool, error) {
	want, _ := s.ref.Leave(ctx, gate, node, instance)
	lv, ok := s.c.(distributed.Leaver)
	if !ok {
		s.t.Fatalf("%T is not a distributed.Leaver", s.c)
	}
	got, err := lv.Leave(ctx, gate, node, instance)
	if err != nil || got != want {
		s.t.Fatalf("%s leaving: removed %v, %v; want removed %v", node, got, err, want)
	}
	return got, nil
}

// fixedLimit is a Controller whose limit the schedule sets.
type fixedLimit struct{ v atomic.Int64 }

func (l *fixedLimit) Observe(time.Time, adaptive.Sample) int { return int(l.v.Load()) }
func (l *fixedLimit) Limit() int                             { return int(l.v.Load()) }
func (l *fixedLimit) Name() string                           { return "fixed" }
