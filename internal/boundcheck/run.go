package boundcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Start is every schedule's first instant: a window start, far ahead of
// any store's clock (Redis expires keys on its own).
var Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Told is what one step's client was told.
type Told struct {
	Admitted bool
	Extra    int64 // Settle: what was charged past the reservation
	Refunded int64 // Settle: what went back
}

// Play runs sc on sc.Nodes engines sharing store (domain prefix names its
// keys apart from other runs'), and returns what each step's client was
// told. An error is the engine's: a store failure, or a policy it refused.
func Play(ctx context.Context, sc Schedule, store gale.Store, domain string) ([]Told, error) {
	set := func(limit int64) (*policy.Set, error) {
		src := sc.Spec.YAML(limit)
		src = "domain: " + domain + src[len("domain: bc"):]
		d, err := policy.Parse("bc.yaml", []byte(src))
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", src, err)
		}
		return &policy.Set{Domains: []*policy.Domain{d}}, nil
	}
	first, err := set(sc.Spec.Limit)
	if err != nil {
		return nil, err
	}
	engines := make([]*engine.Engine, sc.Nodes)
	for i := range engines {
		e, err := engine.New(engine.Options{Store: store, StoreTimeout: 30 * time.Second})
		if err != nil {
			return nil, err
		}
		defer e.Close(context.Background())
		if err := e.Load(ctx, first); err != nil {
			return nil, err
		}
		engines[i] = e
	}
	told := make([]Told, len(sc.Steps))
	held := map[int]*engine.Reservation{}
	for i, st := range sc.Steps {
		now := Start.Add(st.At)
		req := func() *engine.Request {
			return &engine.Request{Domain: domain, HitsAddend: uint32(st.Cost),
				Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: "tenant", Value: st.Tenant}}}}}
		}
		switch st.Kind {
		case Check:
			resp, err := engines[st.Node].Decide(ctx, req(), now)
			if err != nil {
				return nil, fmt.Errorf("step %d (%v): %w", i, st, err)
			}
			told[i].Admitted = resp.Code == engine.CodeOK
		case Reserve:
			res, _, err := engines[st.Node].Reserve(ctx, req(), now)
			if err != nil {
				return nil, fmt.Errorf("step %d (%v): %w", i, st, err)
			}
			if res != nil {
				held[i] = res
				told[i].Admitted = true
			}
		case Settle:
			res := held[st.Ref]
			if res == nil {
				continue // its reservation was refused: nothing ran
			}
			delete(held, st.Ref)
			s, err := res.Settle(ctx, st.Cost, now)
			if err != nil {
				return nil, fmt.Errorf("step %d (%v): %w", i, st, err)
			}
			told[i] = Told{Admitted: true, Extra: s.Extra, Refunded: s.Refunded}
		case Reload:
			s, err := set(st.Cost)
			if err != nil {
				return nil, err
			}
			for _, e := range engines {
				if err := e.Load(ctx, s); err != nil {
					return nil, fmt.Errorf("step %d (%v): %w", i, st, err)
				}
			}
		}
	}
	for _, res := range held { // a reservation left open ends at its reservation
		_, _ = res.Settle(ctx, res.Units(), Start.Add(sc.Steps[len(sc.Steps)-1].At))
	}
	return told, nil
}
