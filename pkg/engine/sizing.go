package engine

import (
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/sizing"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// newSizer gives each key of a `batch: auto` rule its own EOQ learner,
// bounded by the rule's capacity and starting at a tenth of it (the fixed
// default). The configuration is checked once here, so the per-key factory
// cannot fail.
func newSizer(r gale.Rule, l policy.Lease) (func() gale.BatchSizer, error) {
	capacity := float64(r.Capacity())
	cfg := sizing.Config{
		Cost:    sizing.Cost{OrderCost: l.OrderCost, StrandPenalty: l.StrandPenalty},
		Min:     1,
		Max:     max(capacity, 1),
		Initial: max(capacity/10, 1),
	}
	if _, err := sizing.NewLeaseSizer(cfg); err != nil {
		return nil, err
	}
	return func() gale.BatchSizer {
		s, _ := sizing.NewLeaseSizer(cfg) // checked above
		return s
	}, nil
}
