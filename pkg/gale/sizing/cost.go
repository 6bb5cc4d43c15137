// Package sizing chooses how many credits a leased limiter asks the shared
// store for at a time.
//
// With window coupling (package gale), credits expire when the store window
// that granted them ends, so a fleet admits at most the rule's Limit per
// window whatever batch sizes its nodes lease. The batch therefore governs
// only efficiency: a small batch costs many store round trips, a large one
// strands credits that expire unused. For a node serving demand D per window
// this is the Economic Order Quantity trade,
//
//	f_D(b) = OrderCost·D/b + StrandPenalty·b/2     (coordination + stranding)
//
// minimised at b* = √(2·OrderCost·D/StrandPenalty). D is unknown, skewed
// across nodes and drifting, so no fixed b is right: LeaseSizer learns the
// batch online with AdaGrad on x = ln b, and PredictiveSizer arbitrates, with
// Hedge, between "follow the predicted demand" and a LeaseSizer.
//
// Everything here is a pure value: no goroutine, no clock, no I/O. The
// limiter runs one sizer per key, feeds it each window's served demand and
// reads the next batch; locking, if any, is the caller's.
package sizing

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalidConfig is wrapped by the errors NewLeaseSizer and
// NewPredictiveSizer return for a Config (or eta) they cannot use; the
// message names the field.
var ErrInvalidConfig = errors.New("sizing: invalid config")

// Cost is the EOQ cost of leasing in batches of b credits for a node that
// serves demand D credits per window:
//
//	f_D(b) = OrderCost·D/b + StrandPenalty·b/2
//
// OrderCost is the cost of one store round trip; StrandPenalty the cost of
// one credit leased and left to expire (on average half a batch is stranded
// at the window's end). Only their ratio moves the optimum.
//
// A zero field means 1 (DefaultOrderCost, DefaultStrandPenalty), in At and
// Optimum as in NewLeaseSizer, so the zero Cost is the unit cost f_D(b) =
// D/b + b/2. Negative, infinite or NaN fields are rejected by the
// constructors.
type Cost struct {
	OrderCost, StrandPenalty float64
}

// Defaults for a zero Cost field.
const (
	DefaultOrderCost     = 1.0
	DefaultStrandPenalty = 1.0
)

// withDefaults returns c with zero fields replaced by their defaults.
func (c Cost) withDefaults() Cost {
	if c.OrderCost == 0 {
		c.OrderCost = DefaultOrderCost
	}
	if c.StrandPenalty == 0 {
		c.StrandPenalty = DefaultStrandPenalty
	}
	return c
}

func (c Cost) validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"Cost.OrderCost", c.OrderCost}, {"Cost.StrandPenalty", c.StrandPenalty}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%w: %s is %v, want a finite value ≥ 0 (0 means 1)", ErrInvalidConfig, f.name, f.v)
		}
	}
	return nil
}

// At returns f_D(b) for demand D ≥ 0 and batch b > 0 (both in credits per
// window).
func (c Cost) At(demand, batch float64) float64 {
	c = c.withDefaults()
	return c.OrderCost*demand/batch + c.StrandPenalty*batch/2
}

// Optimum returns the unconstrained minimiser of At for demand ≥ 0:
// b* = √(2·OrderCost·D/StrandPenalty). At b*, coordination and stranding
// cost the same, and f_D(b*) = √(2·OrderCost·StrandPenalty·D).
func (c Cost) Optimum(demand float64) float64 {
	c = c.withDefaults()
	return math.Sqrt(2 * c.OrderCost * demand / c.StrandPenalty)
}

// logGradient returns d/dx f_D(eˣ) at b = eˣ: the derivative in log-space,
// −OrderCost·D/b + StrandPenalty·b/2. c has its defaults applied.
func (c Cost) logGradient(demand, batch float64) float64 {
	return -c.OrderCost*demand/batch + c.StrandPenalty*batch/2
}
