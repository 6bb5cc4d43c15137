package sizing

import (
	"fmt"
	"math"
)

const (
	// DefaultEta is the Hedge learning rate used when NewPredictiveSizer is
	// given eta = 0. Losses are in [0, 1], so an expert that loses 0.5 more
	// than the other per window loses half its relative weight in about
	// 1.4/DefaultEta windows.
	DefaultEta = 1.0
	// maxLogWeightGap bounds how far the log-weights of the two experts
	// drift apart (a fixed-share style floor: the trailing expert keeps at
	// least e^−12 ≈ 6·10⁻⁶ of the weight). Without it, a predictor that was
	// right for a long time would need as long to lose the lead once it goes
	// wrong; with it, the lead changes within about 12/(eta·Δloss) windows.
	maxLogWeightGap = 12.0
)

// The experts, as indices into PredictiveSizer's arrays.
const (
	followExpert = 0 // batch = Optimum(predicted demand)
	robustExpert = 1 // the inner LeaseSizer
)

// PredictiveSizer sizes leases from a demand prediction when the prediction
// earns it. It is a Hedge (exponential weights) meta-learner over two
// experts: "follow the prediction", which proposes Cost.Optimum(predicted),
// and a robust LeaseSizer. Each window, each expert's loss is its
// inefficiency 1 − f_D(b_opt)/f_D(b) ∈ [0, 1], where b_opt is the best batch
// within [Min, Max] for the real demand D; the loss is scale-free, so
// windows of high and low demand weigh alike.
//
// The batch played is the weighted geometric mean of the experts' batches.
// Because f_D(eˣ) is convex in x, it costs no more (up to rounding) than the
// weighted mean of the experts' costs: with accurate predictions the sizer
// approaches the clairvoyant optimum, with useless ones it falls back to
// the LeaseSizer's no-regret guarantee.
//
// Call Batch with the prediction before each window and Observe with the
// real demand after it. The zero value is not usable; call
// NewPredictiveSizer. A PredictiveSizer is not safe for concurrent use.
type PredictiveSizer struct {
	robust LeaseSizer
	eta    float64 // Hedge learning rate, > 0
	// logW are the experts' log-weights. Invariant: max(logW) == 0 and
	// min(logW) ≥ −maxLogWeightGap.
	logW [2]float64
	// proposed are the experts' batches at the last Batch call, valid when
	// pending; Observe scores them.
	proposed [2]int64
	pending  bool
}

// NewPredictiveSizer returns a PredictiveSizer whose inner LeaseSizer uses c
// and whose Hedge learning rate is eta > 0 (0 means DefaultEta). Both
// experts start with equal weight. It returns an error wrapping
// ErrInvalidConfig when c or eta is invalid.
func NewPredictiveSizer(c Config, eta float64) (*PredictiveSizer, error) {
	if eta == 0 {
		eta = DefaultEta
	}
	if !(eta > 0) || math.IsInf(eta, 0) {
		return nil, fmt.Errorf("%w: eta is %v, want a finite value > 0", ErrInvalidConfig, eta)
	}
	s, err := NewLeaseSizer(c)
	if err != nil {
		return nil, err
	}
	return &PredictiveSizer{robust: *s, eta: eta}, nil
}

// Batch returns the batch for the coming window given predicted, the
// predicted demand in credits. A negative prediction counts as 0, +Inf as
// unbounded (Max); a NaN prediction carries no information, so the follow
// expert proposes the robust batch. The experts' proposals are remembered
// for the next Observe; calling Batch again replaces them.
func (p *PredictiveSizer) Batch(predicted float64) int64 {
	r := p.robust.Batch()
	f := r
	if !math.IsNaN(predicted) {
		f = p.robust.round(p.robust.cost.Optimum(max(predicted, 0)))
	}
	p.proposed = [2]int64{followExpert: f, robustExpert: r}
	p.pending = true
	w := p.weights()
	x := w[followExpert]*math.Log(float64(f)) + w[robustExpert]*math.Log(float64(r))
	return p.robust.round(math.Exp(x))
}

// Observe feeds the window's real demand (credits, finite and ≥ 0): it
// updates the Hedge weights from the losses of the batches the experts
// proposed at the last Batch call (if any since the previous Observe), then
// feeds the inner LeaseSizer. It panics on a negative, infinite or NaN
// demand.
func (p *PredictiveSizer) Observe(demand float64) {
	checkDemand(demand)
	if p.pending {
		p.pending = false
		best := p.robust.cost.At(demand, p.bestBatch(demand))
		for i, b := range p.proposed {
			loss := 1 - best/p.robust.cost.At(demand, float64(b))
			p.logW[i] -= p.eta * min(max(loss, 0), 1)
		}
		top := max(p.logW[0], p.logW[1])
		for i := range p.logW {
			p.logW[i] = max(p.logW[i]-top, -maxLogWeightGap)
		}
	}
	p.robust.Observe(demand)
}

// Weights returns the Hedge weights of the follow-the-prediction expert and
// of the robust LeaseSizer; they sum to 1.
func (p *PredictiveSizer) Weights() (follow, robust float64) {
	w := p.weights()
	return w[followExpert], w[robustExpert]
}

func (p *PredictiveSizer) weights() [2]float64 {
	a, b := math.Exp(p.logW[0]), math.Exp(p.logW[1])
	return [2]float64{a / (a + b), b / (a + b)}
}

// bestBatch returns the minimiser of f_demand over [Min, Max] (real-valued).
func (p *PredictiveSizer) bestBatch(demand float64) float64 {
	lo, hi := math.Exp(p.robust.lo), math.Exp(p.robust.hi)
	return min(max(p.robust.cost.Optimum(demand), lo), hi)
}
