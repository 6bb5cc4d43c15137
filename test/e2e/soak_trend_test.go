package e2e

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// trend is a least-squares-free, outlier-proof fit of a series over time:
// the Theil–Sen slope (the median of the slopes between every pair of
// points). A Redis restart or a latency spike moves a few samples far off
// the line; they move the median of the pairwise slopes little, where they
// would tilt an ordinary least-squares fit.
type trend struct {
	slope  float64 // units per second
	span   float64 // seconds from the first sample to the last
	median float64 // the series' median, the scale the rise is judged against
}

// rise is how much the fitted line climbs over the series' span.
func (tr trend) rise() float64 { return tr.slope * tr.span }

// theilSen fits ys sampled at xs (seconds, increasing). It needs two
// points at least.
func theilSen(xs, ys []float64) trend {
	var slopes []float64
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if dx := xs[j] - xs[i]; dx > 0 {
				slopes = append(slopes, (ys[j]-ys[i])/dx)
			}
		}
	}
	tr := trend{span: xs[len(xs)-1] - xs[0], median: median(ys)}
	if len(slopes) > 0 {
		tr.slope = median(slopes)
	}
	return tr
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// growthLimit says how much a series may rise over the last half of a soak
// and still be flat: relative of its median, or floor, whichever is more.
type growthLimit struct {
	relative float64 // of the median: 0.05 is 5%
	floor    float64 // in the series' unit
}

func (g growthLimit) allowed(median float64) float64 {
	return max(g.relative*math.Abs(median), g.floor)
}

// Limits of TestE2ESoak's slope test (see soakTrendLimits' reasoning in
// soak_test.go's doc).
var (
	rssGrowth       = growthLimit{relative: 0.05, floor: 8 << 20}
	goroutineGrowth = growthLimit{relative: 0.05, floor: 5}
)

// checkFlat returns an error when ys, over the last half of the samples,
// rises by more than g allows.
func checkFlat(what string, xs, ys []float64, g growthLimit) (trend, error) {
	h := len(xs) / 2
	if len(xs)-h < 2 {
		return trend{}, fmt.Errorf("%s: %d samples, too few for a slope", what, len(xs))
	}
	tr := theilSen(xs[h:], ys[h:])
	if tr.rise() > g.allowed(tr.median) {
		return tr, fmt.Errorf("%s rises by %.4g over the last %.0f s (Theil–Sen slope %.4g/s, median %.4g), more than the %.4g allowed",
			what, tr.rise(), tr.span, tr.slope, tr.median, g.allowed(tr.median))
	}
	return tr, nil
}

// TestSoakFlatCheck drives checkFlat with synthetic series shaped like a
// soak's: a flat one with noise, restarts and a warm-up ramp passes; a
// real leak — a goroutine per 5 s reload, RSS growing 2 MiB every 5 s —
// fails, in a 60 s run as in a 10 min one.
func TestSoakFlatCheck(t *testing.T) {
	for _, d := range []int{60, 600} {
		xs := make([]float64, d)
		for i := range xs {
			xs[i] = float64(i + 1)
		}
		series := func(base, noise float64, shape func(x float64) float64) []float64 {
			r := rand.New(rand.NewPCG(uint64(d), 7))
			ys := make([]float64, len(xs))
			for i, x := range xs {
				ys[i] = base + shape(x) + noise*r.NormFloat64()
				if i%30 == 15 { // a Redis restart: a burst of reconnecting goroutines and buffers
					ys[i] += 6 * noise
				}
			}
			return ys
		}
		warmUp := func(top float64) func(float64) float64 {
			return func(x float64) float64 { return top * min(x, float64(d)/4) / (float64(d) / 4) }
		}
		step := func(per5s float64) func(float64) float64 {
			return func(x float64) float64 { return per5s * math.Floor(x/5) }
		}
		for _, c := range []struct {
			name     string
			ys       []float64
			g        growthLimit
			wantFlat bool
		}{
			{"goroutines flat ±3 with restarts", series(60, 3, func(float64) float64 { return 0 }), goroutineGrowth, true},
			{"goroutines ramping up in the first quarter", series(60, 3, warmUp(40)), goroutineGrowth, true},
			{"goroutines +1 per reload", series(60, 3, step(1)), goroutineGrowth, false},
			{"RSS flat ±2 MiB with restarts", series(150<<20, 2<<20, func(float64) float64 { return 0 }), rssGrowth, true},
			{"RSS warming up by 60 MiB", series(150<<20, 2<<20, warmUp(60<<20)), rssGrowth, true},
			{"RSS +2 MiB per reload", series(150<<20, 2<<20, step(2<<20)), rssGrowth, false},
		} {
			t.Run(fmt.Sprintf("%ds/%s", d, c.name), func(t *testing.T) {
				tr, err := checkFlat(c.name, xs, c.ys, c.g)
				if (err == nil) != c.wantFlat {
					t.Errorf("checkFlat: %v (rise %.4g over %.0f s, median %.4g); want flat %v", err, tr.rise(), tr.span, tr.median, c.wantFlat)
				}
			})
		}
	}
	if _, err := checkFlat("one sample", []float64{1}, []float64{1}, rssGrowth); err == nil {
		t.Error("checkFlat judged a trend from one sample")
	}
}
