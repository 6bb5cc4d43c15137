package model_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/model"
)

// twinFleet is N real leased-mode limiters over one memory store: the nodes
// of the model, each with its own L1.
type twinFleet struct {
	cfg   model.Config
	rule  gale.Rule
	nodes []*gale.Limiter
	keys  int
}

func newTwinFleet(t *testing.T, c model.Config) *twinFleet {
	f := &twinFleet{cfg: c, rule: gale.Rule{Algorithm: gale.FixedWindow, Limit: int64(c.Limit), Period: time.Minute}}
	store := memstore.New()
	for range c.Nodes {
		l, err := gale.New(store, gale.Config{
			Rule:         f.rule,
			Mode:         gale.Leased,
			Lease:        gale.LeaseConfig{Batch: int64(c.Batch), Uncoupled: !c.Coupled},
			StoreTimeout: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		f.nodes = append(f.nodes, l)
	}
	return f
}

// replay runs steps on a fresh key: a node step is one Check of cost 1 on
// that node's limiter at the current instant (the lease, if any, happens
// inside it); a roll moves the instant into the next store window. Every
// check must answer as the model says — served locally, leased for exactly
// the model's grant, or denied — and replay returns the most admissions the
// store windows saw.
func (f *twinFleet) replay(t *testing.T, steps []model.Step) int {
	t.Helper()
	f.keys++
	key := fmt.Sprintf("twin/%d", f.keys)
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	window, admitted, most := 0, 0, 0
	for k, st := range steps {
		if st.Kind == model.Roll {
			window++
			admitted = 0
			continue
		}
		// The k-th step's instant: k µs into its window, so time only moves
		// forward and stays inside the window the model says.
		now := base.Add(time.Duration(window)*time.Minute + time.Duration(k)*time.Microsecond)
		l := f.nodes[st.Node]
		before := l.Stats()
		d, err := l.Check(context.Background(), key, 1, now)
		if err != nil {
			t.Fatalf("step %d (%v): %v", k, st, err)
		}
		after := l.Stats()
		leased := after.CreditsLeased - before.CreditsLeased
		want := st.Kind != model.Deny
		if d.Allowed != want || leased != int64(st.Granted) {
			t.Fatalf("step %d (%v): allowed %v with %d credits leased, model says allowed %v with %d\nsteps: %v",
				k, st, d.Allowed, leased, want, st.Granted, steps)
		}
		if d.Allowed {
			admitted++
			most = max(most, admitted)
		}
	}
	return most
}

// TestTwinRealLimiters drives real gale.Limiters through every transition the
// model explores: for each reachable state, the model's path to it followed by
// each step enabled there (denials included). Every check must agree with the
// model, and the real fleet reaches the model's maxima: Limit + N·(Batch−1)
// uncoupled, Limit window-coupled.
func TestTwinRealLimiters(t *testing.T) {
	for _, tc := range []struct {
		cfg     model.Config
		states  int // pinned: reachable states, up to node symmetry
		replays int // pinned: one per reachable state and step enabled there
		want    int
	}{
		{model.Config{Nodes: 2, Limit: 4, Batch: 2, Windows: 3}, 52, 133, 6},
		{model.Config{Nodes: 2, Limit: 4, Batch: 2, Windows: 3, Coupled: true}, 18, 48, 4},
		{model.Config{Nodes: 3, Limit: 5, Batch: 3, Windows: 4}, 351, 1252, 11},
		{model.Config{Nodes: 3, Limit: 5, Batch: 3, Windows: 4, Coupled: true}, 36, 135, 5},
	} {
		name := fmt.Sprintf("N=%d/L=%d/B=%d/W=%d/coupled=%v", tc.cfg.Nodes, tc.cfg.Limit, tc.cfg.Batch, tc.cfg.Windows, tc.cfg.Coupled)
		t.Run(name, func(t *testing.T) {
			sp, err := model.Explore(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			f := newTwinFleet(t, tc.cfg)
			replays, most := 0, 0
			for i := range sp.States() {
				tr := sp.Trace(i)
				path := make([]model.Step, 0, len(tr.Steps)+1)
				for _, ts := range tr.Steps {
					path = append(path, ts.Step)
				}
				for _, next := range tc.cfg.Next(tr.Last()) {
					most = max(most, f.replay(t, append(path, next.Step)))
					replays++
				}
			}
			if most != sp.MaxAdmitted() || most != tc.want {
				t.Fatalf("real fleet max %d per window, model %d, want %d", most, sp.MaxAdmitted(), tc.want)
			}
			t.Logf("%d states, %d replays, max admitted per window %d", sp.States(), replays, most)
			if sp.States() != tc.states || replays != tc.replays {
				t.Errorf("%d states and %d replays, pinned %d and %d: the model changed", sp.States(), replays, tc.states, tc.replays)
			}
		})
	}
}
