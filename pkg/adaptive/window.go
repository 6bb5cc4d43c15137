package adaptive

import (
	"math"
	"slices"
	"time"
)

// minWindow is the minimum over the last n values pushed, kept in a monotonic
// deque: each value is pushed and popped at most once, so Push is O(1)
// amortised, and the deque never holds more than n entries, so it never grows
// after construction. With n = 0 it is the minimum of every value pushed
// since the last reset, or, made by newBatchWindow, the least median of
// the batches of noloadBatch values pushed since the last reset (the
// median of the values pushed so far before the first batch is whole): a
// recalibration's measure (see recalibrator.step), taken whenever the
// load lets it. The minimum of every jittered answer sinks with their
// number (0.84× the median after 3,000 answers with 5% jitter), and a law
// judging each answer against it reads jitter as a queue: gradient2 held
// clean-ramp's healthy backend at 130 in flight until its first
// recalibration, not 200, and aimd at 190. Vegas keeps the minimum for
// its queue estimate: it judges a round trip by its least RTT, a minimum
// too; its overdue floor takes the batch median (see Vegas.OverdueAfter).
// The zero value is
// unusable; make one with newMinWindow or newBatchWindow.
type minWindow struct {
	n uint64 // window length in values; 0: unbounded
	// batch holds the current batch's values, sorted (newBatchWindow
	// only: cap noloadBatch); best is the least median of a whole batch, 0
	// before any.
	batch []time.Duration
	best  time.Duration
	// fixed, when > 0 (unbounded windows only), is the minimum until the
	// next reset: pushes leave it (see fix).
	fixed time.Duration
	seq   []uint64 // ring of (sequence number, value) pairs; cap n
	val   []time.Duration
	head  int    // index of the front (the window's minimum)
	size  int    // entries in the deque; Invariant: 0 ≤ size ≤ n, values strictly increase front to back
	count uint64 // values pushed since the last reset
}

// noloadBatch is how many values an unbounded minWindow takes the median
// of: a recalibration's default RequestCount.
const noloadBatch = DefaultRecalibrationRequests

func newMinWindow(n int) *minWindow {
	return &minWindow{n: uint64(n), seq: make([]uint64, max(n, 1)), val: make([]time.Duration, max(n, 1))}
}

// newBatchWindow is newMinWindow, but with n = 0 the least batch median.
func newBatchWindow(n int) *minWindow {
	w := newMinWindow(n)
	if n == 0 {
		w.batch = make([]time.Duration, 0, noloadBatch)
	}
	return w
}

// push adds v as the newest value and evicts values older than the window.
func (w *minWindow) push(v time.Duration) {
	if w.fixed > 0 {
		return
	}
	if w.n == 0 && cap(w.batch) == 0 { // unbounded: one cell holds the minimum
		if w.size == 0 || v < w.val[0] {
			w.val[0], w.size = v, 1
		}
		w.count++
		return
	}
	if w.n == 0 { // unbounded: batch medians
		// Insert v in order: a batch is a few dozen values.
		i, _ := slices.BinarySearch(w.batch, v)
		w.batch = slices.Insert(w.batch, i, v)
		med := w.batch[(len(w.batch)-1)/2]
		if len(w.batch) == cap(w.batch) {
			if w.best == 0 || med < w.best {
				w.best = med
			}
			w.batch = w.batch[:0]
		}
		w.val[0], w.size = w.best, 1
		if w.best == 0 { // no whole batch yet
			w.val[0] = med
		}
		w.count++
		return
	}
	// Evict first: the front leaves once n values are newer than it,
	// counting v, which also frees a cell for v in a full ring.
	for w.size > 0 && w.seq[w.head]+w.n <= w.count {
		w.head = (w.head + 1) % len(w.val)
		w.size--
	}
	// Drop from the back every value ≥ v: v outlives them and is no larger.
	for w.size > 0 && w.val[w.back()] >= v {
		w.size--
	}
	i := (w.head + w.size) % len(w.val)
	w.seq[i], w.val[i] = w.count, v
	w.size++
	w.count++
}

func (w *minWindow) back() int { return (w.head + w.size - 1) % len(w.val) }

// min returns the minimum of the window; ok is false when it is empty.
func (w *minWindow) min() (v time.Duration, ok bool) {
	if w.fixed > 0 {
		return w.fixed, true
	}
	if w.size == 0 {
		return 0, false
	}
	return w.val[w.head], true
}

// reset empties the window.
func (w *minWindow) reset() {
	w.head, w.size, w.count, w.fixed, w.best = 0, 0, 0, 0, 0
	w.batch = w.batch[:0]
}

// fix holds an unbounded window's minimum at v until the next reset; a
// bounded window takes v as a value pushed.
func (w *minWindow) fix(v time.Duration) {
	if w.n != 0 {
		w.push(v)
		return
	}
	w.fixed = max(v, 1)
}

// percentile returns the q-quantile (0 < q ≤ 1) of sorted by the nearest-rank
// method: the smallest value with at least q of the values at or below it.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1 // the epsilon absorbs float error in q·n
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sortedP95 sorts xs in place and returns its 95th percentile.
func sortedP95(xs []time.Duration) time.Duration {
	slices.Sort(xs)
	return percentile(xs, 0.95)
}

// ewma folds xs, oldest first, into an exponentially weighted moving average
// giving weight alpha to each newer value; 0 for no values.
func ewma(xs []time.Duration, alpha float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	avg := float64(xs[0])
	for _, x := range xs[1:] {
		avg += alpha * (float64(x) - avg)
	}
	return time.Duration(avg)
}

// knee is the most in flight lately seen answered at about the no-load
// RTT: the highest Inflight of an OK sample no slower than fastFactor ×
// the least RTT seen, admitted since the last cut. A cut for a delay or a
// request never answered takes the limit down to it (below the level that
// was slow or lost), not by a fixed factor, when that is less deep: on a
// backend whose latency doubles one request past its knee, a halving (or
// gradient2's floor) left the limit at half the knee after each probe,
// and CUBIC's regrowth to it took seconds (make bench-gate: 27–30 in
// flight for a knee of 40). The level is forgotten at each cut: a second
// event before any answer admitted after the first has come back fast is
// persistent congestion, and the law's cut applies; a second event on a
// request admitted before the cut (a request reported overdue, then lost)
// is the same congestion, and takes the same level. Errors keep the
// law's cut: a backend answering fast errors above a rate answers the
// rest fast too, and its level says nothing of what it sustains. Only
// a level within √from of the failed level counts (see cutTo).
type knee struct {
	cut         time.Time
	level, prev int // prev: the level the last cut took
	floor       time.Duration
}

// fastFactor is how much slower than the no-load RTT an answer may be and
// still count as unloaded: gradient2's tolerance.
const fastFactor = 1.25

// see records s, an OK sample: judged against the least RTT yet seen,
// not the controller's no-load RTT, which a backend slowing from one
// request in flight (linear) inflates, and with it the level.
func (k *knee) see(s Sample) {
	if k.floor == 0 || s.RTT < k.floor {
		k.floor = s.RTT
	}
	if float64(s.RTT) <= fastFactor*float64(k.floor) && !s.Start.Before(k.cut) {
		k.level = max(k.level, s.Inflight)
	}
}

// cutTo returns the limit a cut at now for s should leave: law's, or, if
// higher, the knee's level below from (the level that was slow or lost);
// and forgets the level.
func (k *knee) cutTo(now time.Time, s Sample, law, from int) int {
	level := k.prev
	if !s.Start.Before(k.cut) {
		level = k.level
		k.cut, k.level, k.prev = now, 0, level
	}
	// Only a knee within one probe (√from, gradient2's headroom) of the
	// level that failed: further below, the congestion is deeper than an
	// overshoot (a backend that slows from one request in flight, a
	// capacity that fell), and the law's cut is the answer.
	if level > 0 && float64(level) >= float64(from)-math.Sqrt(float64(from)) {
		return max(law, min(level, from-1))
	}
	return law
}
