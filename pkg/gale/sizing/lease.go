package sizing

import (
	"fmt"
	"math"
)

// Defaults and bounds for Config.
const (
	// MaxBatch is the largest batch a sizer returns: gale.MaxLimit, the most a
	// store leases at once.
	MaxBatch = 1 << 40
	// DefaultLearningRate is the AdaGrad step used when Config.LearningRate
	// is 0. The step is in log-space: one Observe moves the batch by a factor
	// of at most e^LearningRate (≈7.4 here), and AdaGrad shrinks the steps as
	// gradients accumulate. Tuned on the package's regret and drift tests.
	DefaultLearningRate = 2.0
	// maxGradient clips the log-space gradient so the AdaGrad accumulator
	// stays finite; no demand a limiter serves comes near it.
	maxGradient = 1e100
)

// Config parameterises a sizer. The zero Config is valid: unit costs,
// batches in [1, MaxBatch], a first batch of 1, DefaultLearningRate.
type Config struct {
	// Cost is the EOQ cost the sizer minimises; zero fields mean 1.
	Cost Cost
	// Min and Max bound the batch, in credits: 1 ≤ Min ≤ Max ≤ MaxBatch, and
	// at least one whole number between them. 0 means 1 for Min and
	// MaxBatch for Max.
	Min, Max float64
	// Initial is the first batch, in [Min, Max]; 0 means Min.
	Initial float64
	// LearningRate is the AdaGrad step in log-space, > 0; 0 means
	// DefaultLearningRate.
	LearningRate float64
}

// withDefaults validates c and returns it with its zero fields filled in.
func (c Config) withDefaults() (Config, error) {
	if err := c.Cost.validate(); err != nil {
		return c, err
	}
	c.Cost = c.Cost.withDefaults()
	if c.Min == 0 {
		c.Min = 1
	}
	if c.Max == 0 {
		c.Max = MaxBatch
	}
	if !(c.Min >= 1) || c.Min > MaxBatch {
		return c, fmt.Errorf("%w: Min is %v, want 1..%d", ErrInvalidConfig, c.Min, MaxBatch)
	}
	if !(c.Max >= c.Min) || c.Max > MaxBatch {
		return c, fmt.Errorf("%w: Max is %v, want Min (%v)..%d", ErrInvalidConfig, c.Max, c.Min, MaxBatch)
	}
	if math.Ceil(c.Min) > math.Floor(c.Max) {
		return c, fmt.Errorf("%w: no whole batch between Min %v and Max %v", ErrInvalidConfig, c.Min, c.Max)
	}
	if c.Initial == 0 {
		c.Initial = c.Min
	}
	if !(c.Initial >= c.Min && c.Initial <= c.Max) {
		return c, fmt.Errorf("%w: Initial is %v, want Min (%v)..Max (%v)", ErrInvalidConfig, c.Initial, c.Min, c.Max)
	}
	if c.LearningRate == 0 {
		c.LearningRate = DefaultLearningRate
	}
	if !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0) {
		return c, fmt.Errorf("%w: LearningRate is %v, want a finite value > 0", ErrInvalidConfig, c.LearningRate)
	}
	return c, nil
}

// LeaseSizer learns the batch online with AdaGrad in log-space: it keeps
// x = ln b and, for each window's demand D, steps against the gradient of
// f_D(eˣ), which is convex in x. Working on ln b lets one step size serve
// optima that span orders of magnitude; AdaGrad's accumulated step size
// copes with a gradient that is unbounded (it grows with D and b). Against
// the best fixed batch in hindsight its regret is O(√T).
//
// Use one LeaseSizer per key: read Batch for the next lease, and Observe each
// window's served demand. The zero value is not usable; call NewLeaseSizer.
// A LeaseSizer is not safe for concurrent use.
type LeaseSizer struct {
	cost   Cost    // defaults applied
	lo, hi float64 // ln Min, ln Max
	minB   int64   // ⌈Min⌉
	maxB   int64   // ⌊Max⌋
	rate   float64 // AdaGrad step, > 0
	// demandCap is the demand whose optimum is Max; Observe treats more as
	// this much (the batch is Max either way), which keeps gradients bounded.
	demandCap float64
	// x is ln of the current (unrounded) batch. Invariant: lo ≤ x ≤ hi.
	x float64
	// sumSq is AdaGrad's Σ g² over the gradients seen. Invariant: finite, ≥ 0.
	sumSq float64
	// batch is round(eˣ) clamped to [minB, maxB], kept in step with x.
	batch int64
}

// NewLeaseSizer returns a LeaseSizer whose first batch is c.Initial. It
// returns an error wrapping ErrInvalidConfig when c is invalid.
func NewLeaseSizer(c Config) (*LeaseSizer, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &LeaseSizer{
		cost: c.Cost,
		lo:   math.Log(c.Min),
		hi:   math.Log(c.Max),
		minB: int64(math.Ceil(c.Min)),
		maxB: int64(math.Floor(c.Max)),
		rate: c.LearningRate,
		// Optimum(demandCap) = Max.
		demandCap: c.Cost.StrandPenalty * c.Max * c.Max / (2 * c.Cost.OrderCost),
	}
	s.set(math.Log(c.Initial))
	return s, nil
}

// Batch returns the batch to lease next, in credits: the learned batch
// rounded to a whole number within [Min, Max].
func (s *LeaseSizer) Batch() int64 { return s.batch }

// Observe feeds one window's served demand (credits, finite and ≥ 0) and
// takes an AdaGrad step on f_demand at the current batch. Demand above the
// level whose optimum is Max counts as that level. It panics on a negative,
// infinite or NaN demand: that is the caller's bug, and would poison every
// later batch.
//
// AdaGrad's steps only shrink, by the gradients seen so far: windows of
// demand far from the usual (relative to the batch) slow later learning.
// Bounding Max to the largest batch that makes sense keeps this in check.
func (s *LeaseSizer) Observe(demand float64) {
	checkDemand(demand)
	g := s.cost.logGradient(min(demand, s.demandCap), math.Exp(s.x))
	g = min(max(g, -maxGradient), maxGradient)
	s.sumSq += g * g
	if s.sumSq > 0 {
		s.set(s.x - s.rate*g/math.Sqrt(s.sumSq))
	}
}

// set moves the iterate to x, projected onto [lo, hi], and updates batch.
func (s *LeaseSizer) set(x float64) {
	s.x = min(max(x, s.lo), s.hi)
	s.batch = s.round(math.Exp(s.x))
}

// round returns b as a whole batch within [minB, maxB]; NaN gives minB. It
// rounds n ≤ b < n+1 up when b ≥ √(n·(n+1)), not at n + ½: that is where
// f_D(n) = f_D(n+1) for the D whose optimum is b, so the whole batch nearest
// an optimum (in this sense) is the cheapest whole batch.
func (s *LeaseSizer) round(b float64) int64 {
	r := math.Floor(b)
	if b*b >= r*(r+1) {
		r++
	}
	if !(r >= float64(s.minB)) {
		return s.minB
	}
	if r >= float64(s.maxB) {
		return s.maxB
	}
	return int64(r)
}

func checkDemand(d float64) {
	if !(d >= 0) || math.IsInf(d, 1) {
		panic(fmt.Sprintf("sizing: demand %v is not finite and ≥ 0", d))
	}
}
