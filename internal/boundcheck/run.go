package boundcheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Start is every schedule's first instant: a window start of every period
// a schedule draws, far ahead of any store's clock (Redis expires keys on
// its own).
var Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Told is what one step's client was told.
type Told struct {
	Admitted bool
	Extra    int64 // Settle: what was charged past the reservation
	Refunded int64 // Settle: what went back
}

// node is one engine of the fleet, on its own clock.
type node struct {
	e     *engine.Engine
	clock *clock.Fake
	store *nodeStore
	gen   int // how many engines were in its place before
}

// Play runs sc on sc.Nodes engines sharing a store from b (domain prefix
// names its keys apart from other runs'), and returns what each step's
// client was told. Each engine decides on its clock, the schedule's
// instant plus its skew, and its fake clock reads the same. An error is
// the engine's: a store failure, or a policy it refused.
func Play(ctx context.Context, sc Schedule, b Backend, domain string) ([]Told, error) {
	set := func(sp Spec) (*policy.Set, error) {
		src := "domain: " + domain + strings.TrimPrefix(sp.YAML(), "domain: bc")
		d, err := policy.Parse("bc.yaml", []byte(src))
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", src, err)
		}
		return &policy.Set{Domains: []*policy.Domain{d}}, nil
	}
	cur, err := set(sc.Spec)
	if err != nil {
		return nil, err
	}
	fleet := &fleetStore{cur: b.New()}
	nodes := make([]*node, sc.Nodes)
	var gone []*node // killed: closed once the schedule is over, their calls cut
	defer func() {
		for _, n := range append(gone, nodes...) {
			if n != nil {
				_ = n.e.Close(context.Background())
			}
		}
	}()
	start := func(i int, at time.Duration) error {
		s, ns := newNodeStore(fleet, b.Local)
		c := clock.NewFake(Start.Add(sc.Stamp(i, at)))
		e, err := engine.New(engine.Options{Store: s, StoreTimeout: 30 * time.Second, Clock: c})
		if err != nil {
			return err
		}
		gen := 0
		if nodes[i] != nil {
			gen = nodes[i].gen + 1
		}
		nodes[i] = &node{e: e, clock: c, store: ns, gen: gen}
		return e.Load(ctx, cur)
	}
	for i := range nodes {
		if err := start(i, 0); err != nil {
			return nil, err
		}
	}
	told := make([]Told, len(sc.Steps))
	type held struct {
		res *engine.Reservation
		gen int
	}
	open := map[int]held{}
	for i, st := range sc.Steps {
		req := func() *engine.Request {
			return &engine.Request{Domain: domain, HitsAddend: uint32(st.Cost),
				Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "tenant", Value: st.Tenant}}}}}
		}
		at := func(n int) time.Time {
			now := Start.Add(sc.Stamp(n, st.At))
			nodes[n].clock.Set(now)
			return now
		}
		fail := func(err error) ([]Told, error) { return nil, fmt.Errorf("step %d (%v): %w", i, st, err) }
		switch st.Kind {
		case Check:
			resp, err := nodes[st.Node].e.Decide(ctx, req(), at(st.Node))
			if err != nil {
				return fail(err)
			}
			told[i].Admitted = resp.Code == engine.CodeOK
		case Reserve:
			res, _, err := nodes[st.Node].e.Reserve(ctx, req(), at(st.Node))
			if err != nil {
				return fail(err)
			}
			if res != nil {
				open[i] = held{res, nodes[st.Node].gen}
				told[i].Admitted = true
			}
		case Settle:
			h, ok := open[st.Ref]
			n := sc.Steps[st.Ref].Node
			if !ok || h.gen != nodes[n].gen {
				continue // refused, or its node was killed or stopped: nothing ran
			}
			delete(open, st.Ref)
			s, err := h.res.Settle(ctx, st.Cost, at(n))
			if err != nil {
				return fail(err)
			}
			told[i] = Told{Admitted: true, Extra: s.Extra, Refunded: s.Refunded}
		case Reload:
			s, err := set(*st.Policy)
			if err != nil {
				return fail(err)
			}
			cur = s
			for n := range nodes {
				at(n)
				if err := nodes[n].e.Load(ctx, s); err != nil {
					return fail(err)
				}
			}
		case Kill:
			at(st.Node)
			nodes[st.Node].store.dead.Store(true)
			gone = append(gone, nodes[st.Node])
			if err := start(st.Node, st.At); err != nil {
				return fail(err)
			}
		case Stop:
			at(st.Node)
			if err := nodes[st.Node].e.Close(ctx); err != nil {
				return fail(err)
			}
			if err := start(st.Node, st.At); err != nil {
				return fail(err)
			}
		case Restart:
			if err := fleet.restart(ctx, b); err != nil {
				return fail(err)
			}
		}
	}
	if len(sc.Steps) > 0 {
		last := sc.Steps[len(sc.Steps)-1].At
		for ref, h := range open { // a reservation left open ends at its reservation
			n := sc.Steps[ref].Node
			if h.gen == nodes[n].gen {
				_, _ = h.res.Settle(ctx, h.res.Units(), Start.Add(sc.Stamp(n, last)))
			}
		}
	}
	return told, nil
}
