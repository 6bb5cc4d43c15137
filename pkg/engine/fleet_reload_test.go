package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
)

// fleetBackend is a coordinator under test and a reader of its records.
type fleetBackend struct {
	name  string
	start func(t *testing.T) (distributed.Coordinator, func(gate string) ([]distributed.Record, error))
}

// fleetBackends are the three coordinators a distributed gate meets in:
// memory, and Redis and PostgreSQL servers started for the test, each on
// the callers' (fake) clock.
var fleetBackends = []fleetBackend{
	{name: "memory", start: func(*testing.T) (distributed.Coordinator, func(string) ([]distributed.Record, error)) {
		m := distributed.NewMemory()
		return m, func(gate string) ([]distributed.Record, error) { return m.Records(gate), nil }
	}},
	{name: "redis", start: func(t *testing.T) (distributed.Coordinator, func(string) ([]distributed.Record, error)) {
		c, err := rediscoord.New(testenv.StartRedis(t).Client(), rediscoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c, func(gate string) ([]distributed.Record, error) { return c.Records(bg, gate) }
	}},
	{name: "postgres", start: func(t *testing.T) (distributed.Coordinator, func(string) ([]distributed.Record, error)) {
		ctx, cancel := context.WithTimeout(bg, 30*time.Second)
		defer cancel()
		c, err := pgcoord.New(ctx, testenv.StartPostgres(t).Pool(t, nil), pgcoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return c, func(gate string) ([]distributed.Record, error) { return c.Records(bg, gate) }
	}},
}

// editedGate is distributedGate with min_limit 5: another identity, so a
// reload builds a new gate and a new node for it.
// localGate replaces the distributed gate with a local one.
const localGate = "concurrency:\n  - name: local\n    match: {path_prefix: /local}\n"

var editedGate = strings.Replace(distributedGate, "min_limit: 10", "min_limit: 5", 1)

// TestReloadKeepsTheGateInItsFleet, on each coordinator: editing a
// distributed gate builds a new node, which carries on the old one's
// record (no duplicate --node-id refused), its grant (the gate admits at
// once, up to the share, the old gate's requests in flight counted) and
// its requests in flight (reported until they end). Dropping the gate
// takes the node out of its fleet once its requests have ended; with none
// in flight, before Load returns.
func TestReloadKeepsTheGateInItsFleet(t *testing.T) {
	for _, b := range fleetBackends {
		t.Run(b.name, func(t *testing.T) {
			real, records := b.start(t)
			coord := &beats{Coordinator: real, done: make(chan string, 100)}
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			e := sidecarEngine(t, "a", coord, clk)
			mine := func() []distributed.Record {
				t.Helper()
				recs, err := records("backend")
				if err != nil {
					t.Fatal(err)
				}
				return recs
			}
			stat := func() engine.NodeStat {
				t.Helper()
				st := e.NodeStats(clk.Now())
				if len(st) != 1 {
					t.Fatalf("%d distributed gates, want 1", len(st))
				}
				return st[0]
			}
			// admit acquires n requests; with full, it finds the gate full
			// after them.
			admit := func(n int, full bool) []engine.Held {
				t.Helper()
				c, ok := e.ChooseGate("svc", "/x", func(string) (string, bool) { return "", false })
				if !ok || c.Node == nil {
					t.Fatalf("the distributed gate was not chosen with its node: %+v", c)
				}
				var held []engine.Held
				try := n
				if full {
					try++
				}
				for range try {
					h, err := c.Acquire(bg, clk.Now())
					if err != nil {
						break
					}
					held = append(held, h)
				}
				if len(held) != n {
					t.Fatalf("the gate admitted %d (limit %d), want %d; node %+v", len(held), c.Limit(clk.Now()), n, stat())
				}
				return held
			}
			release := func(held []engine.Held) {
				for _, h := range held {
					h.Release(clk.Now(), adaptive.OK)
				}
			}

			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": distributedGate})); err != nil {
				t.Fatal(err)
			}
			coord.wait(t, 1)
			if !testenv.Eventually(func() bool { return stat().Ceiling == 10 }) {
				t.Fatalf("node %+v, want a ceiling of 10 alone", stat())
			}
			old := admit(3, false)

			// Edit the gate: a new gate and node, the old gate's 3 in flight.
			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": editedGate})); err != nil {
				t.Fatal(err)
			}
			if st := stat(); st.Ceiling != 10 || st.Inflight != 3 {
				t.Fatalf("just after the edit, before a beat: node %+v, want the old grant's ceiling 10 with the old gate's 3 in flight", st)
			}
			now := admit(7, true) // the share less the old gate's 3
			coord.wait(t, 1)      // the new node's first beat, at Load
			if !testenv.Eventually(func() bool { st := stat(); return st.RoundTrips == 1 && st.AppliedGen > 1 }) {
				t.Fatalf("after the new node's first beat: %+v", stat())
			}
			st := stat()
			instance := st.Instance
			if st.Duplicates != 0 || st.Mode != distributed.ModeGranted || st.Ceiling != 10 {
				t.Fatalf("after the new node's first beat: %+v, want granted, no duplicate", st)
			}
			coord.round(t, clk, 1) // the first beat may have gone before admit(7)
			if recs := mine(); len(recs) != 1 || recs[0].Instance != st.Instance || recs[0].Inflight != 10 {
				t.Fatalf("records %+v, want the new node's alone (instance %q) with both gates' 10 in flight", recs, st.Instance)
			}
			release(old)
			coord.round(t, clk, 1)
			if recs := mine(); len(recs) != 1 || recs[0].Inflight != 7 {
				t.Fatalf("records %+v once the old gate drained, want 7 in flight", recs)
			}

			// Drop the gate with 7 in flight: it admits nothing, and its
			// record reserves them. Add it back meanwhile: the new node takes
			// the draining one over, its 7 in flight included.
			before, _ := e.ChooseGate("svc", "/x", func(string) (string, bool) { return "", false })
			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": localGate})); err != nil {
				t.Fatal(err)
			}
			if recs := mine(); len(recs) != 1 {
				t.Fatalf("records %+v while the dropped gate has 7 in flight, want its record", recs)
			}
			if _, err := before.Acquire(bg, clk.Now()); err == nil {
				t.Fatal("the dropped gate's node admitted a request that chose it before the reload")
			}
			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": distributedGate})); err != nil {
				t.Fatal(err)
			}
			if st := stat(); st.Ceiling != 10 || st.Inflight != 7 || st.Instance != instance {
				t.Fatalf("the gate added back while its node drained: %+v, want it taken over: ceiling 10, 7 in flight, instance %q", st, instance)
			}
			more := admit(3, true)
			coord.wait(t, 1)
			coord.round(t, clk, 1) // the first beat may have gone before admit(3)
			if recs := mine(); len(recs) != 1 || recs[0].Instance != instance || recs[0].Inflight != 10 {
				t.Fatalf("records %+v, want the one record, 10 in flight", recs)
			}

			// Drop it with 10 in flight, again: gone once they have ended.
			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": localGate})); err != nil {
				t.Fatal(err)
			}
			release(now)
			if recs := mine(); len(recs) != 1 {
				t.Fatalf("records %+v while the dropped gate has 3 in flight, want its record", recs)
			}
			release(more)
			if !testenv.Eventually(func() bool { return len(mine()) == 0 }) {
				t.Fatalf("records %+v once the dropped gate drained, want none", mine())
			}

			// Add it back: a fresh node joins; drop it idle: gone before
			// Load returns.
			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": distributedGate})); err != nil {
				t.Fatal(err)
			}
			coord.wait(t, 1)
			if !testenv.Eventually(func() bool { return stat().Ceiling == 10 }) {
				t.Fatalf("the gate added back: %+v, want a ceiling of 10", stat())
			}
			if st := stat(); st.Instance == instance || st.Duplicates != 0 {
				t.Fatalf("the gate added back after its node left: %+v, want a new instance, no duplicate", st)
			}
			if err := e.Load(bg, loadDir(t, map[string]string{"g.yaml": localGate})); err != nil {
				t.Fatal(err)
			}
			if recs := mine(); len(recs) != 0 {
				t.Fatalf("records %+v once Load dropped the idle gate, want none", recs)
			}
		})
	}
}
