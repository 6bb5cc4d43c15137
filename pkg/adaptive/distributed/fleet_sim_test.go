package distributed_test

import (
	"container/heap"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// The live gate benchmark's shape (test/benchgate), on the fake timeline of
// an event queue: a backend serving each request in base up to knee in
// flight and 2 × base × n/knee past it, plus a jitter (exponential, mean
// base/10, each request's own: the noise every gate sees its share of);
// closed-loop clients split among the sidecars, a refused one asking again
// after retry. No CPU is measured, so the figures do not depend on the
// machine.
const (
	simKnee    = 40
	simBase    = 50 * time.Millisecond
	simClients = 80
	simRetry   = 25 * time.Millisecond
	simWarm    = 6 * time.Second
	simMeasure = 10 * time.Second
	simBeat    = 200 * time.Millisecond
)

type simEvent struct {
	at     time.Time
	kind   int // 0 a client asks, 1 a request ends, 2 a heartbeat
	who    int // the client, or the node beating
	end    func(time.Time)
	serial int
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].serial < q[j].serial
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// simResult is a run's goodput (completions a second over the measured
// phase, as a fraction of knee/base) and the backend's mean in flight.
type simResult struct{ goodput, inflight float64 }

// simulateFleet runs kind at its defaults (params: p95's target) on nodes
// sidecars (1: a plain gate, no coordinator) under aggregate agg.
func simulateFleet(t *testing.T, kind string, nodes int, agg distributed.Aggregate, seed uint64) simResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	var params map[string]string
	if kind == "p95" {
		params = map[string]string{"target": (2 * simBase).String()}
	}
	coord := distributed.NewMemory()
	acquire := make([]func(time.Time) (func(time.Time, adaptive.Outcome), bool), nodes)
	var fleet []*distributed.Node
	for i := range nodes {
		ctl, err := adaptive.NewNamed(kind, adaptive.Limits{}, params, rand.New(rand.NewPCG(seed, uint64(i))))
		if err != nil {
			t.Fatal(err)
		}
		g := newTestGate(t, ctl)
		if nodes == 1 {
			acquire[i] = func(now time.Time) (func(time.Time, adaptive.Outcome), bool) {
				l, ok := g.TryAcquire(now)
				return l.Release, ok
			}
			continue
		}
		n := newTestNode(t, g, distributed.NodeConfig{Node: fmt.Sprintf("n%d", i), Coordinator: coord,
			Heartbeat: simBeat, Fleet: distributed.Config{Handoff: true, Aggregate: agg}})
		fleet = append(fleet, n)
		acquire[i] = func(now time.Time) (func(time.Time, adaptive.Outcome), bool) {
			l, ok := n.TryAcquire(now)
			return l.Release, ok
		}
	}
	var q simQueue
	serial := 0
	push := func(e simEvent) { serial++; e.serial = serial; heap.Push(&q, e) }
	t0 := nodeT0
	for c := range simClients {
		push(simEvent{at: t0.Add(time.Duration(c) * time.Millisecond), kind: 0, who: c})
	}
	for i := range fleet {
		push(simEvent{at: t0.Add(time.Duration(i) * simBeat / time.Duration(len(fleet))), kind: 2, who: i})
	}
	end, from := t0.Add(simWarm+simMeasure), t0.Add(simWarm)
	inflight, done := 0, 0
	var area float64 // ∫ in flight dt over the measured phase
	last := from
	for q.Len() > 0 {
		e := heap.Pop(&q).(simEvent)
		if e.at.After(end) {
			break
		}
		if e.at.After(from) {
			area += float64(inflight) * e.at.Sub(last).Seconds()
			last = e.at
		}
		switch e.kind {
		case 0:
			rel, ok := acquire[e.who%nodes](e.at)
			if !ok {
				push(simEvent{at: e.at.Add(simRetry), kind: 0, who: e.who})
				continue
			}
			inflight++
			lat := simBase
			if inflight > simKnee {
				lat = time.Duration(float64(2*simBase) * float64(inflight) / simKnee)
			}
			lat += time.Duration(rng.ExpFloat64() * float64(simBase) / 10)
			who := e.who
			push(simEvent{at: e.at.Add(lat), kind: 1, who: who, end: func(now time.Time) { rel(now, adaptive.OK) }})
		case 1:
			inflight--
			e.end(e.at)
			if e.at.After(from) {
				done++
			}
			push(simEvent{at: e.at, kind: 0, who: e.who})
		case 2:
			if _, err := fleet[e.who].Beat(context.Background(), e.at); err != nil {
				t.Fatal(err)
			}
			push(simEvent{at: e.at.Add(simBeat), kind: 2, who: e.who})
		}
	}
	ideal := float64(simKnee) / simBase.Seconds()
	return simResult{goodput: float64(done) / simMeasure.Seconds() / ideal, inflight: area / simMeasure.Seconds()}
}

var fleetSim = flag.Bool("fleet-sim", false, "run TestSimulatedFleetAgainstOneGate (seconds; a tool, it asserts nothing)")

// TestSimulatedFleetAgainstOneGate logs four coordinated sidecars against
// one, the live gate benchmark's shape on a fake timeline, for each
// controller at its defaults and each aggregate, six seeds. A tool, not a
// bar: its backend's latency depends only on the in flight count and a
// per-request jitter, and it disagreed with the live benchmark on which
// growth check a fleet wants (docs/fleet-gates.md), so it asserts nothing.
//
//	go test -run TestSimulatedFleetAgainstOneGate -v ./pkg/adaptive/distributed/ -args -fleet-sim
func TestSimulatedFleetAgainstOneGate(t *testing.T) {
	if !*fleetSim {
		t.Skip("a tool: -args -fleet-sim")
	}
	const seeds = 6
	for _, kind := range []string{"gradient2", "aimd", "vegas", "p95"} {
		for _, agg := range []distributed.Aggregate{distributed.Min, distributed.Median, distributed.Mean} {
			var g, in float64
			worst := math.Inf(1)
			for seed := range uint64(seeds) {
				one := simulateFleet(t, kind, 1, agg, seed)
				f := simulateFleet(t, kind, 4, agg, seed)
				g += f.goodput / one.goodput / seeds
				in += f.inflight / one.inflight / seeds
				worst = min(worst, f.goodput/one.goodput)
			}
			t.Logf("%-9s %-6v four/one: goodput %.2f× (worst seed %.2f×), backend in flight %.2f×", kind, agg, g, worst, in)
		}
	}
}
