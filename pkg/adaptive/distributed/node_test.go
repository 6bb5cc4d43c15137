package distributed_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// nodeT0 starts every node test's timeline.
var nodeT0 = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

// limitKnob is a Controller whose limit the test sets; the gate takes a new
// value at its next Release.
type limitKnob struct{ limit atomic.Int64 }

func newKnob(l int) *limitKnob {
	k := &limitKnob{}
	k.limit.Store(int64(l))
	return k
}
func (k *limitKnob) Observe(time.Time, adaptive.Sample) int { return int(k.limit.Load()) }
func (k *limitKnob) Limit() int                             { return int(k.limit.Load()) }
func (k *limitKnob) Name() string                           { return "knob" }

// limitStepper is a Controller that moves its limit on every Observe, cycling
// through [1, max]. The gate serializes its calls.
type limitStepper struct{ limit, max int }

func (s *limitStepper) Observe(time.Time, adaptive.Sample) int {
	s.limit = s.limit%s.max + 1
	return s.limit
}
func (s *limitStepper) Limit() int   { return s.limit }
func (s *limitStepper) Name() string { return "limitStepper" }

func newTestGate(t testing.TB, c adaptive.Controller) *adaptive.Gate {
	t.Helper()
	g, err := adaptive.NewGate(adaptive.GateConfig{Controller: c})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newTestNode(t testing.TB, g *adaptive.Gate, c distributed.NodeConfig) *distributed.Node {
	t.Helper()
	if c.Node == "" {
		c.Node = "a"
	}
	if c.Gate == "" {
		c.Gate = "checkout"
	}
	n, err := distributed.NewNode(g, c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// scriptedCoord answers each heartbeat with answer(call, rep, now), call
// counting from 1, and keeps every report. answer runs without the lock,
// so it may call back into the node.
type scriptedCoord struct {
	mu      sync.Mutex
	reports []distributed.Report
	cfgs    []distributed.Config
	answer  func(call int, rep distributed.Report, now time.Time) (distributed.Grant, error)
}

func (s *scriptedCoord) Heartbeat(_ context.Context, _ string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	s.mu.Lock()
	s.reports = append(s.reports, rep)
	s.cfgs = append(s.cfgs, cfg)
	call := len(s.reports)
	s.mu.Unlock()
	return s.answer(call, rep, now)
}

func (s *scriptedCoord) report(i int) distributed.Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reports[i]
}

// grantAt is a Granted answer at now with a lease of ttl, in a fleet of one
// with L_global 10.
func grantAt(gen uint64, share int, now time.Time, ttl time.Duration) distributed.Grant {
	return distributed.Grant{Status: distributed.Granted, Share: share, Gen: gen, Global: 10, Live: 1,
		ExpiresAt: now.Add(ttl).UnixMicro(), Now: now.UnixMicro()}
}

// shareScript answers call k with generation k and share shares[k-1] (the last
// one repeated), leases of 2s.
func shareScript(s ...int) *scriptedCoord {
	return &scriptedCoord{answer: func(call int, _ distributed.Report, now time.Time) (distributed.Grant, error) {
		return grantAt(uint64(call), s[min(call, len(s))-1], now, 2*time.Second), nil
	}}
}

// admitAll admits through n at now until it refuses, and returns the leases.
func admitAll(n *distributed.Node, now time.Time) []distributed.Lease {
	var ls []distributed.Lease
	for {
		l, ok := n.TryAcquire(now)
		if !ok {
			return ls
		}
		ls = append(ls, l)
	}
}

func mustBeat(t *testing.T, n *distributed.Node, now time.Time) distributed.Grant {
	t.Helper()
	g, err := n.Beat(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// waitUntil polls cond until it holds, for at most 10s of real time.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func TestNodeConfigErrors(t *testing.T) {
	g := newTestGate(t, newKnob(10))
	coord := distributed.NewMemory()
	ok := distributed.NodeConfig{Node: "a", Gate: "checkout", Coordinator: coord}
	for _, tc := range []struct {
		name string
		gate *adaptive.Gate
		mod  func(*distributed.NodeConfig)
		want string
	}{
		{"no nodeId", g, func(c *distributed.NodeConfig) { c.Node = "" }, "Node is empty"},
		{"no gate", nil, func(*distributed.NodeConfig) {}, "gate is nil"},
		{"no gate name", g, func(c *distributed.NodeConfig) { c.Gate = "" }, "Gate is empty"},
		{"no coordinator", g, func(c *distributed.NodeConfig) { c.Coordinator = nil }, "Coordinator is nil"},
		{"negative heartbeat", g, func(c *distributed.NodeConfig) { c.Heartbeat = -1 }, "Heartbeat -1ns is negative"},
		{"negative TTL", g, func(c *distributed.NodeConfig) { c.Fleet.LeaseTTL = -1 }, "LeaseTTL -1ns is negative"},
		{"heartbeat = TTL", g, func(c *distributed.NodeConfig) { c.Fleet.LeaseTTL = time.Second }, "Heartbeat 1s ≥ LeaseTTL 1s"},
		{"heartbeat > TTL", g, func(c *distributed.NodeConfig) { c.Heartbeat, c.Fleet.LeaseTTL = 3*time.Second, 2*time.Second }, "Heartbeat 3s ≥ LeaseTTL 2s"},
		{"negative debounce", g, func(c *distributed.NodeConfig) { c.EagerDebounce = -1 }, "EagerDebounce -1ns"},
		{"negative margin", g, func(c *distributed.NodeConfig) { c.SelfFence, c.FenceMargin = true, -1 }, "FenceMargin -1ns is negative"},
		{"margin without fencing", g, func(c *distributed.NodeConfig) { c.FenceMargin = time.Millisecond }, "FenceMargin 1ms without SelfFence"},
		{"OnFenced without fencing", g, func(c *distributed.NodeConfig) { c.OnFenced = func() {} }, "OnFenced without SelfFence"},
		{"margin = TTL", g, func(c *distributed.NodeConfig) { c.SelfFence, c.FenceMargin = true, 2*time.Second }, "FenceMargin 2s ≥ LeaseTTL 2s"},
		{"margin > TTL − heartbeat", g, func(c *distributed.NodeConfig) { c.SelfFence, c.FenceMargin = true, 1500*time.Millisecond },
			"FenceMargin 1.5s ≥ LeaseTTL 2s − Heartbeat 1s"},
		{"negative static share", g, func(c *distributed.NodeConfig) { c.Outage = distributed.StaticShare(-1) }, "StaticShare(-1) is negative"},
		{"unknown aggregate", g, func(c *distributed.NodeConfig) { c.Fleet.Aggregate = 9 }, "unknown aggregate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			if _, err := distributed.NewNode(tc.gate, c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewNode: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := distributed.NewNode(g, ok); err != nil {
		t.Fatalf("the valid config: %v", err)
	}
}

func TestNodeDefaults(t *testing.T) {
	s := shareScript(5)
	n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: s})
	m := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: s})
	mustBeat(t, n, nodeT0)
	if got := s.cfgs[0].LeaseTTL; got != 2*distributed.DefaultHeartbeat {
		t.Errorf("LeaseTTL %v, want 2 × %v", got, distributed.DefaultHeartbeat)
	}
	if n.Instance() == "" || n.Instance() == m.Instance() {
		t.Errorf("instances %q and %q: want random, distinct", n.Instance(), m.Instance())
	}
	if r := s.report(0); r.Node != "a" || r.Instance != n.Instance() || r.Seq != 1 || r.Local != 10 {
		t.Errorf("first report %+v", r)
	}
}

// The node admits exactly while inflight < min(share, L_local), checked
// against that naive rule for every small share, local limit and count
// already in flight (held above the share after a lowering, or above the
// local limit after a decrease).
func TestNodeAdmitsBelowShareAndLocal(t *testing.T) {
	for share := range 5 {
		for local := 1; local <= 4; local++ {
			for held := range 6 {
				knob := newKnob(10)
				g := newTestGate(t, knob)
				n := newTestNode(t, g, distributed.NodeConfig{Coordinator: shareScript(10, share)})
				mustBeat(t, n, nodeT0)
				for range held {
					if _, ok := n.TryAcquire(nodeT0); !ok {
						t.Fatal("setup: refused under share 10")
					}
				}
				knob.limit.Store(int64(local))
				l, _ := n.TryAcquire(nodeT0) // a release makes the gate take the new limit
				l.Release(nodeT0, adaptive.OK)
				mustBeat(t, n, nodeT0)

				want := max(0, min(share, local)-held)
				before := g.Snapshot()
				if got := len(admitAll(n, nodeT0)); got != want {
					t.Fatalf("share %d, local %d, held %d: admitted %d, want %d", share, local, held, got, want)
				}
				after := g.Snapshot()
				if after.Allowed-before.Allowed != int64(want) || after.Rejected-before.Rejected != 1 {
					t.Fatalf("share %d, local %d, held %d: the gate allowed %d and rejected %d, want %d and 1",
						share, local, held, after.Allowed-before.Allowed, after.Rejected-before.Rejected, want)
				}
			}
		}
	}
}

// Admissions and releases from many goroutines, with the local limit moving
// on every release and the share on every beat: every decision the node
// takes is the gate's own (its Allowed and Rejected are the node's
// admissions and refusals: nothing the share admits is refused by the
// gate), and in flight never exceeds the largest share.
func TestNodeGateAgreesUnderHammer(t *testing.T) {
	const maxShare = 5
	g := newTestGate(t, &limitStepper{limit: 4, max: 8})
	var over atomic.Int64
	coord := &scriptedCoord{answer: func(call int, rep distributed.Report, now time.Time) (distributed.Grant, error) {
		if rep.Inflight > maxShare {
			over.Add(1)
		}
		return grantAt(uint64(call), call%(maxShare+1), now, time.Hour), nil
	}}
	n := newTestNode(t, g, distributed.NodeConfig{Coordinator: coord, EagerDebounce: time.Millisecond})
	var admitted, refused, beats atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l, ok := n.TryAcquire(nodeT0)
				if !ok {
					refused.Add(1)
					continue
				}
				admitted.Add(1)
				if i%4 == 0 {
					runtime.Gosched() // hold it across other goroutines' steps
				}
				l.Release(nodeT0.Add(time.Millisecond), adaptive.OK)
				l.Release(nodeT0, adaptive.OK) // idempotent
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				mustBeat(t, n, nodeT0)
				beats.Add(1)
			}
		}
	})
	waitUntil(t, "a busy hammer", func() bool {
		return beats.Load() >= 100 && admitted.Load() >= 500 && refused.Load() >= 500
	})
	close(stop)
	wg.Wait()
	s := g.Snapshot()
	if s.Allowed != admitted.Load() || s.Rejected != refused.Load() {
		t.Fatalf("gate allowed %d, rejected %d; node admitted %d, refused %d", s.Allowed, s.Rejected, admitted.Load(), refused.Load())
	}
	if s.Inflight != 0 || over.Load() != 0 {
		t.Fatalf("inflight %d at the end; %d reports above share %d", s.Inflight, over.Load(), maxShare)
	}
}

// A heartbeat's report is the state before the call, all of it: during the
// call the node admits two more requests and a second, overlapping beat
// applies a newer grant, and neither shows in the first report. The first
// call's reply, older than the grant in force when it lands, is ignored.
func TestNodeSnapshotAndReorderedReplies(t *testing.T) {
	var n *distributed.Node
	var nested distributed.Grant
	coord := &scriptedCoord{}
	coord.answer = func(call int, _ distributed.Report, now time.Time) (distributed.Grant, error) {
		switch call {
		case 1:
			return grantAt(1, 10, now, 2*time.Second), nil
		case 2: // the first beat is in flight: traffic, then an overtaking beat
			for range 2 {
				if _, ok := n.TryAcquire(now); !ok {
					t.Error("refused under share 10")
				}
			}
			nested = mustBeat(t, n, now)
			return grantAt(2, 10, now, 2*time.Second), nil
		case 3:
			return grantAt(3, 4, now, 2*time.Second), nil
		}
		return grantAt(uint64(call), 4, now, 2*time.Second), nil
	}
	n = newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
	mustBeat(t, n, nodeT0)
	for range 3 {
		n.TryAcquire(nodeT0)
	}
	late := mustBeat(t, n, nodeT0)

	r2, r3 := coord.report(1), coord.report(2)
	if r2.Seq != 2 || r2.Inflight != 3 || r2.AppliedGen != 1 || r2.Demand != 3 {
		t.Errorf("the overtaken beat reported %+v, want seq 2, inflight 3, applied 1: the state when it was sent", r2)
	}
	if r3.Seq != 3 || r3.Inflight != 5 || r3.AppliedGen != 1 {
		t.Errorf("the overtaking beat reported %+v, want seq 3, inflight 5, applied 1", r3)
	}
	if nested.Gen != 3 || late.Gen != 2 {
		t.Fatalf("grants %d then %d", nested.Gen, late.Gen)
	}
	s := n.Stats(nodeT0)
	if s.AppliedGen != 3 || s.Share != 4 || s.IssuedGen != 3 {
		t.Fatalf("after the late reply: %+v, want generation 3 and share 4 in force", s)
	}
	if _, ok := n.TryAcquire(nodeT0); ok {
		t.Fatal("admitted a sixth request: the late share 10 was applied")
	}
	mustBeat(t, n, nodeT0)
	if r4 := coord.report(3); r4.AppliedGen != 3 || r4.Inflight != 5 {
		t.Errorf("next report %+v, want applied 3, inflight 5", r4)
	}
}

// With leases never released, in flight only grows; from generation k on
// every grant is share 0, so once the node applies one it admits nothing
// more. Every report naming such a generation must then carry the final
// count: a report whose generation was read after a concurrent beat applied
// it, and whose in-flight count was read before admissions that the old
// share still allowed, would carry less.
func TestNodeSnapshotAtomicUnderConcurrency(t *testing.T) {
	const k = 20
	coord := &scriptedCoord{answer: func(call int, _ distributed.Report, now time.Time) (distributed.Grant, error) {
		share := 1 << 20
		if call > k {
			share = 0
		}
		return grantAt(uint64(call), share, now, time.Hour), nil
	}}
	g := newTestGate(t, newKnob(1<<20))
	n := newTestNode(t, g, distributed.NodeConfig{Coordinator: coord})
	mustBeat(t, n, nodeT0)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					n.TryAcquire(nodeT0)
				}
			}
		})
	}
	var beaters sync.WaitGroup
	for range 2 {
		beaters.Go(func() {
			for range 100 {
				mustBeat(t, n, nodeT0)
			}
		})
	}
	beaters.Wait()
	close(stop)
	wg.Wait()
	final, late := g.Inflight(), 0
	for i := range len(coord.reports) {
		if r := coord.report(i); r.AppliedGen > k {
			late++
			if r.Inflight != final {
				t.Fatalf("report %+v under a share-0 generation: inflight %d, want the final %d", r, r.Inflight, final)
			}
		}
	}
	if late == 0 {
		t.Fatal("no report named a share-0 generation")
	}
}

// A node whose record was evicted (its lease ran out while it was cut off)
// gets a fresh record that numbers on above the generation the node echoes,
// so the node applies its grants at once.
func TestNodeFollowsARecreatedRecord(t *testing.T) {
	coord := distributed.NewMemory()
	a := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "a", Coordinator: coord})
	b := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "b", Coordinator: coord})
	for range 5 {
		mustBeat(t, a, nodeT0)
	}
	later := nodeT0.Add(3 * time.Second)
	mustBeat(t, b, later) // evicts a
	g := mustBeat(t, a, later)
	if g.Gen != 6 || g.Live != 2 {
		t.Fatalf("the recreated record's grant: %+v, want generation 6 (above the 5 a applied), 2 live", g)
	}
	s := a.Stats(later)
	if s.Mode != distributed.ModeGranted || s.AppliedGen != 6 || s.Share != g.Share || s.GenLag != 1 {
		t.Fatalf("after the eviction: %+v, want granted at generation 6", s)
	}
	mustBeat(t, a, later)
	if s := a.Stats(later); s.AppliedGen != 7 || s.AckedGen != 6 {
		t.Fatalf("next beat: %+v, want generation 7 applied, 6 acknowledged", s)
	}
}

// The lease end is carried over to the node's clock by the coordinator's
// own difference (its clock may be anywhere), and capped at LeaseTTL.
func TestNodeLeaseEndOnNodeClock(t *testing.T) {
	coordNow := nodeT0.Add(-time.Hour) // the coordinator's clock is an hour behind
	for _, tc := range []struct {
		name      string
		remaining time.Duration
		want      time.Duration
	}{
		{"as granted", 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"capped at LeaseTTL", time.Minute, 2 * time.Second},
		{"already over", -time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			coord := &scriptedCoord{answer: func(int, distributed.Report, time.Time) (distributed.Grant, error) {
				return distributed.Grant{Status: distributed.Granted, Share: 3, Gen: 1, Global: 3, Live: 1,
					ExpiresAt: coordNow.Add(tc.remaining).UnixMicro(), Now: coordNow.UnixMicro()}, nil
			}}
			n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: coord})
			mustBeat(t, n, nodeT0)
			if got := n.Stats(nodeT0).LeaseEnd; !got.Equal(nodeT0.Add(tc.want)) {
				t.Fatalf("lease end %v, want t0+%v", got.Sub(nodeT0), tc.want)
			}
		})
	}
}

// Self-fencing: admitting up to leaseEnd − FenceMargin exclusive, nothing
// from that instant, OnFenced once per episode, unfenced by a beat.
func TestNodeSelfFence(t *testing.T) {
	for _, outage := range []distributed.OutagePolicy{distributed.KeepLastShare(), distributed.StaticShare(5)} {
		t.Run(outage.String(), func(t *testing.T) {
			var fired atomic.Int64
			n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{
				Coordinator: distributed.NewMemory(), SelfFence: true, FenceMargin: 500 * time.Millisecond,
				Outage: outage, OnFenced: func() { fired.Add(1) },
			})
			mustBeat(t, n, nodeT0) // lease to t0+2s, fence at t0+1.5s
			fenceAt := nodeT0.Add(1500 * time.Millisecond)

			l, ok := n.TryAcquire(fenceAt.Add(-time.Nanosecond))
			if !ok {
				t.Fatal("refused just before the fence")
			}
			l.Release(fenceAt, adaptive.OK)
			if s := n.Stats(fenceAt); !s.Fenced || s.Mode != distributed.ModeFenced || s.Ceiling != 0 || fired.Load() != 0 {
				t.Fatalf("at the fence, before any admission: %+v, fired %d; want fenced, ceiling 0, not yet fired", s, fired.Load())
			}
			for i := range 3 {
				if _, ok := n.TryAcquire(fenceAt.Add(time.Duration(i) * time.Millisecond)); ok {
					t.Fatal("admitted while fenced")
				}
			}
			if fired.Load() != 1 || n.Stats(fenceAt).Fencings != 1 {
				t.Fatalf("OnFenced called %d times, want 1", fired.Load())
			}

			now := nodeT0.Add(1600 * time.Millisecond)
			mustBeat(t, n, now) // renews to now+2s: fence at now+1.5s
			if _, ok := n.TryAcquire(now); !ok {
				t.Fatal("still fenced after a successful beat")
			}
			if _, ok := n.TryAcquire(now.Add(1500 * time.Millisecond)); ok || fired.Load() != 2 {
				t.Fatalf("second episode: admitted %v, fired %d; want refused, fired 2", ok, fired.Load())
			}
		})
	}
}

// errCoordDown is a coordinator failure that is not a duplicate.
var errCoordDown = errors.New("coordinator down")

// What a node admits before its first grant, under a grant, through a
// failed call, after its lease has ended and after recovery, per policy.
func TestNodeOutagePolicies(t *testing.T) {
	type step struct {
		at      time.Duration
		beat    string // "", "ok" or "fail"
		mode    distributed.Mode
		ceiling int
	}
	for _, tc := range []struct {
		name   string
		policy distributed.OutagePolicy
		local  int
		steps  []step
	}{
		{"keep last share", distributed.KeepLastShare(), 10, []step{
			{0, "", distributed.ModeWaiting, 0},
			{0, "ok", distributed.ModeGranted, 3},
			{time.Second, "fail", distributed.ModeHolding, 3},
			{2*time.Second - 1, "", distributed.ModeHolding, 3},
			{2 * time.Second, "", distributed.ModeLapsed, 0},
			{3 * time.Second, "fail", distributed.ModeLapsed, 0},
			{4 * time.Second, "ok", distributed.ModeGranted, 3},
			{6 * time.Second, "", distributed.ModeLapsed, 0}, // the lease ran out without a failed call
		}},
		{"static share", distributed.StaticShare(2), 10, []step{
			{0, "", distributed.ModeWaiting, 2},
			{0, "fail", distributed.ModeWaiting, 2},
			{0, "ok", distributed.ModeGranted, 3},
			{time.Second, "fail", distributed.ModeStatic, 2},
			{2 * time.Second, "", distributed.ModeStatic, 2},
			{3 * time.Second, "ok", distributed.ModeGranted, 3},
			{5 * time.Second, "", distributed.ModeStatic, 2}, // the lease ran out without a failed call
		}},
		{"static share capped by L_local", distributed.StaticShare(50), 4, []step{
			{0, "", distributed.ModeWaiting, 4},
			{0, "ok", distributed.ModeGranted, 3},
			{time.Second, "fail", distributed.ModeStatic, 4},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var down atomic.Bool
			gen := uint64(0)
			coord := &scriptedCoord{answer: func(_ int, _ distributed.Report, now time.Time) (distributed.Grant, error) {
				if down.Load() {
					return distributed.Grant{}, errCoordDown
				}
				gen++
				return grantAt(gen, 3, now, 2*time.Second), nil
			}}
			n := newTestNode(t, newTestGate(t, newKnob(tc.local)), distributed.NodeConfig{Coordinator: coord, Outage: tc.policy})
			for i, st := range tc.steps {
				now := nodeT0.Add(st.at)
				if st.beat != "" {
					down.Store(st.beat == "fail")
					_, err := n.Beat(context.Background(), now)
					if (err != nil) != (st.beat == "fail") || err != nil && !errors.Is(err, errCoordDown) {
						t.Fatalf("step %d: Beat: %v", i, err)
					}
				}
				s := n.Stats(now)
				if s.Mode != st.mode || s.Ceiling != st.ceiling {
					t.Fatalf("step %d at t0+%v: mode %v, ceiling %d; want %v, %d", i, st.at, s.Mode, s.Ceiling, st.mode, st.ceiling)
				}
				ls := admitAll(n, now)
				if len(ls) != st.ceiling {
					t.Fatalf("step %d: admitted %d, want %d", i, len(ls), st.ceiling)
				}
				for _, l := range ls {
					l.Release(now, adaptive.OK)
				}
			}
		})
	}
}

// A second live process claiming a nodeId is refused and told so; neither
// its state nor the incumbent's changes, and it is not taken for an outage.
// Stats says it is refused as a duplicate until a beat is granted.
func TestNodeDuplicateNodeID(t *testing.T) {
	coord := distributed.NewMemory()
	first := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "x", Coordinator: coord})
	var reported []error
	second := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "x", Coordinator: coord,
		Outage: distributed.StaticShare(1), OnDuplicate: func(err error) { reported = append(reported, err) }})
	mustBeat(t, first, nodeT0)
	before := second.Stats(nodeT0)
	_, err := second.Beat(context.Background(), nodeT0.Add(time.Millisecond))
	if !errors.Is(err, distributed.ErrDuplicateNode) {
		t.Fatalf("Beat: %v, want ErrDuplicateNode", err)
	}
	if len(reported) != 1 || reported[0] != err {
		t.Fatalf("OnDuplicate got %v, want the error Beat returned", reported)
	}
	after := second.Stats(nodeT0)
	if after.Duplicates != 1 || after.Errors != 1 || after.RoundTrips != 1 || !after.Duplicate {
		t.Fatalf("counters %+v, want one duplicate, and refused as one", after)
	}
	after.Duplicates, after.Errors, after.RoundTrips, after.Duplicate = 0, 0, 0, false
	if after != before {
		t.Fatalf("the refused node changed: %+v → %+v", before, after)
	}
	if recs := coord.Records("checkout"); len(recs) != 1 || recs[0].Instance != first.Instance() {
		t.Fatalf("records %+v: want only the incumbent's", recs)
	}

	// A node holding a grant keeps it through a duplicate refusal: under
	// StaticShare an outage would switch it to the static share.
	dup := false
	script := &scriptedCoord{answer: func(call int, _ distributed.Report, now time.Time) (distributed.Grant, error) {
		if dup {
			return distributed.Grant{}, fmt.Errorf("refused: %w", distributed.ErrDuplicateNode)
		}
		return grantAt(uint64(call), 3, now, 2*time.Second), nil
	}}
	n := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Coordinator: script, Outage: distributed.StaticShare(1)})
	mustBeat(t, n, nodeT0)
	dup = true
	if _, err := n.Beat(context.Background(), nodeT0); !errors.Is(err, distributed.ErrDuplicateNode) {
		t.Fatalf("Beat: %v", err)
	}
	if s := n.Stats(nodeT0); s.Mode != distributed.ModeGranted || s.Ceiling != 3 || !s.Duplicate {
		t.Fatalf("after a duplicate refusal: mode %v, ceiling %d, duplicate %v; want granted, 3, true", s.Mode, s.Ceiling, s.Duplicate)
	}
	dup = false
	mustBeat(t, n, nodeT0)
	if s := n.Stats(nodeT0); s.Duplicate {
		t.Fatalf("after a granted beat: %+v, want no longer refused as a duplicate", s)
	}
}

// A node leaving its fleet: refused while a request is in flight; then its
// record goes at once, it admits nothing and beats no more, and the other
// node takes the whole ceiling at its next beat, inside the leaver's lease.
func TestNodeLeave(t *testing.T) {
	coord := distributed.NewMemory()
	a := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "a", Coordinator: coord})
	b := newTestNode(t, newTestGate(t, newKnob(10)), distributed.NodeConfig{Node: "b", Coordinator: coord})
	mustBeat(t, a, nodeT0)
	mustBeat(t, b, nodeT0)
	mustBeat(t, a, nodeT0)
	if g := mustBeat(t, b, nodeT0); g.Share != 5 {
		t.Fatalf("b's share %d, want 5 of 10", g.Share)
	}
	l, ok := a.TryAcquire(nodeT0)
	if !ok {
		t.Fatal("a refused under its share")
	}
	if removed, err := a.Leave(context.Background()); removed || !errors.Is(err, distributed.ErrInFlight) {
		t.Fatalf("leaving with one in flight: %v, %v; want ErrInFlight", removed, err)
	}
	if s := a.Stats(nodeT0); s.Mode != distributed.ModeGranted {
		t.Fatalf("after the refused leave: %+v, want still granted", s)
	}
	l.Release(nodeT0, adaptive.OK)
	if removed, err := a.Leave(context.Background()); !removed || err != nil {
		t.Fatalf("leave: %v, %v; want the record removed", removed, err)
	}
	if _, ok := a.TryAcquire(nodeT0); ok {
		t.Fatal("a admitted after leaving")
	}
	if s := a.Stats(nodeT0); s.Mode != distributed.ModeLeft || s.Ceiling != 0 {
		t.Fatalf("after leaving: %+v, want mode left, ceiling 0", s)
	}
	if _, err := a.Beat(context.Background(), nodeT0); !errors.Is(err, distributed.ErrLeft) {
		t.Fatalf("a beat after leaving: %v, want ErrLeft", err)
	}
	if g := mustBeat(t, b, nodeT0.Add(time.Millisecond)); g.Share != 10 || g.Live != 1 {
		t.Fatalf("b after a left: %+v, want all 10 alone", g)
	}
}
