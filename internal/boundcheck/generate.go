package boundcheck

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Generate draws a schedule from seed: a policy of one to three limits of
// distinct counters (fixed and sliding windows, GCRA, token buckets) in a
// mode, or a fair rule (often with more tenants than the limit has units),
// 1–4 nodes, and 3–6 windows of checks and reservations (a hostile client
// picks reservations of 1 and real costs far above them), with now and then
// a reload that re-figures, renames, reorders, moves or re-counts a limit,
// a node killed or stopped, the store restarted, and skewed clocks; or a
// steady demand under one fixed window, repeated every window.
func Generate(seed uint64) Schedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := Schedule{Seed: seed, Nodes: 1 + rng.IntN(4)}
	sp := &sc.Spec
	sp.Mode = []Mode{Strict, CachedDeny, Leased}[rng.IntN(3)]
	sp.Batch = 1 + rng.Int64N(8)
	sp.Fair = rng.IntN(3) == 0
	if sp.Fair && rng.IntN(3) == 0 {
		sp.MaxTenants = 1 + rng.IntN(8)
	}
	sc.Steady = rng.IntN(3) == 0
	windowed := sp.Fair || sc.Steady || rng.IntN(3) == 0 // skew needs windows
	switch {
	case sp.Fair || sc.Steady:
		sp.Limits = []Limit{drawLimit(rng, Counter{FixedWindow, Window})}
	default:
		sp.Limits = drawLimits(rng, 1+[]int{0, 0, 0, 1, 1, 2}[rng.IntN(6)], windowed, nil)
	}
	dedupeNames(sp.Limits)
	per := perWindow(*sp)
	tenants := 1 + rng.IntN(int(2*per)+2) // past the limit's units, often
	costs := !sc.Steady && rng.IntN(3) == 0
	windows := 3 + rng.IntN(4)
	end := time.Duration(windows) * Window
	faults(rng, &sc, end)
	if windowed && !sc.Steady && rng.IntN(4) == 0 {
		spread := []time.Duration{10 * time.Millisecond, 500 * time.Millisecond, 3 * time.Second}[rng.IntN(3)]
		for range sc.Nodes {
			sc.Skew = append(sc.Skew, time.Duration(rng.Int64N(int64(2*spread+1)))-spread)
		}
	}
	if sc.Steady {
		calls := 1 + rng.IntN(int(3*per)+5)
		var one []Step
		for range calls {
			one = append(one, Step{At: time.Duration(rng.Int64N(int64(Window))), Node: rng.IntN(sc.Nodes), Tenant: fmt.Sprintf("t%d", rng.IntN(tenants)), Cost: 1})
		}
		for w := range windows {
			for _, st := range one {
				st.At += time.Duration(w) * Window
				sc.Steps = append(sc.Steps, st)
			}
		}
		sortSteps(&sc)
		return sc
	}
	cur := *sp
	var open []int // reservations not yet settled
	for w := range windows {
		start := time.Duration(w) * Window
		if w > 0 && rng.IntN(4) == 0 {
			next := reload(rng, cur, windowed)
			cur = next
			sc.Steps = append(sc.Steps, Step{At: start + time.Duration(rng.Int64N(int64(Window))), Kind: Reload, Policy: &next})
		}
		calls := 1 + rng.IntN(int(3*per)+5)
		for range calls {
			st := Step{At: start + time.Duration(rng.Int64N(int64(Window))), Node: rng.IntN(sc.Nodes), Tenant: fmt.Sprintf("t%d", rng.IntN(tenants))}
			switch {
			case costs && rng.IntN(2) == 0:
				st.Kind = Reserve
				st.Cost = 1 + rng.Int64N(max(1, per/4))
				if rng.IntN(2) == 0 {
					st.Cost = 1 // a hostile client reserves as little as it may
				}
			case costs && len(open) > 0 && rng.IntN(2) == 0:
				i := rng.IntN(len(open))
				st.Kind, st.Ref = Settle, open[i]
				st.Node, st.Tenant = sc.Steps[open[i]].Node, ""
				open = append(open[:i], open[i+1:]...)
				st.Cost = rng.Int64N(2 * per) // often far above its reservation
			default:
				st.Kind = Check
				st.Cost = 1
				if rng.IntN(4) == 0 {
					st.Cost = 1 + rng.Int64N(max(1, per/3))
				}
			}
			sc.Steps = append(sc.Steps, st)
			if st.Kind == Reserve {
				open = append(open, len(sc.Steps)-1)
			}
		}
	}
	sortSteps(&sc)
	return sc
}

// faults adds to sc, now and then, nodes killed or stopped and the store
// restarted, at instants before end.
func faults(rng *rand.Rand, sc *Schedule, end time.Duration) {
	if rng.IntN(4) == 0 {
		for range 1 + rng.IntN(2) {
			kind := Kill
			if rng.IntN(3) == 0 {
				kind = Stop
			}
			sc.Steps = append(sc.Steps, Step{At: time.Duration(rng.Int64N(int64(end))), Kind: kind, Node: rng.IntN(sc.Nodes)})
		}
	}
	if rng.IntN(5) == 0 {
		for range 1 + rng.IntN(2) {
			sc.Steps = append(sc.Steps, Step{At: time.Duration(rng.Int64N(int64(end))), Kind: Restart})
		}
	}
}

// counters are the counters a schedule's limits are drawn from, the first
// the most often: windows of 5 s to 30 s, buckets refilled per second or
// per Window.
var counters = []Counter{
	{FixedWindow, Window}, {FixedWindow, Window}, {SlidingWindow, Window}, {GCRA, time.Second}, {GCRA, Window},
	{TokenBucket, time.Second}, {TokenBucket, Window}, {FixedWindow, 5 * time.Second}, {FixedWindow, 2 * Window},
	{FixedWindow, 3 * Window}, {SlidingWindow, 2 * Window},
}

// drawLimits draws n limits of distinct counters not in taken (windowed
// ones only when windowed).
func drawLimits(rng *rand.Rand, n int, windowed bool, taken []Limit) []Limit {
	var out []Limit
	for tries := 0; len(out) < n && tries < 100; tries++ {
		c := counters[rng.IntN(len(counters))]
		if windowed && (c.Algorithm == GCRA || c.Algorithm == TokenBucket) {
			continue
		}
		if slices.ContainsFunc(append(taken, out...), func(l Limit) bool { return l.Counter() == c }) {
			continue
		}
		out = append(out, drawLimit(rng, c))
	}
	return out
}

// drawLimit draws the figures of a limit counting in c: up to about 60
// units per Window, and a bucket's burst.
func drawLimit(rng *rand.Rand, c Counter) Limit {
	l := Limit{Algorithm: c.Algorithm, Period: c.Period}
	l.Count = 1 + rng.Int64N(max(1, 60*int64(c.Period)/int64(Window)))
	if l.bucket() && rng.IntN(3) > 0 {
		l.Burst = 1 + rng.Int64N(2*l.Count+4)
	}
	if rng.IntN(2) == 0 {
		l.Name = fmt.Sprintf("n%d", rng.IntN(100))
	}
	return l
}

// perWindow is about the most sp's limits together admit in a Window.
func perWindow(sp Spec) int64 {
	per := int64(60)
	for _, l := range sp.Limits {
		per = min(per, l.PerWindow())
	}
	return max(1, per)
}

// reload draws the next policy from cur: new figures for a limit, a
// rename or reorder, another mode or batch, a limit moved to another
// counter, or a limit added or removed. A fair rule keeps its one fixed
// window, and is re-figured, renamed or given another period.
func reload(rng *rand.Rand, cur Spec, windowed bool) Spec {
	next := cur
	next.Limits = slices.Clone(cur.Limits)
	i := rng.IntN(len(next.Limits))
	switch r := rng.IntN(10); {
	case r < 4: // re-figure
		l := drawLimit(rng, next.Limits[i].Counter())
		next.Limits[i].Count, next.Limits[i].Burst = l.Count, l.Burst
	case r < 6: // rename, reorder
		next.Limits[i].Name = fmt.Sprintf("n%d", rng.IntN(100))
		rng.Shuffle(len(next.Limits), func(a, b int) { next.Limits[a], next.Limits[b] = next.Limits[b], next.Limits[a] })
	case r < 8 && !next.Fair: // move between modes
		next.Mode = []Mode{Strict, CachedDeny, Leased}[rng.IntN(3)]
		next.Batch = 1 + rng.Int64N(8)
	case next.Fair: // another period: another counter
		p := []time.Duration{5 * time.Second, Window, 2 * Window}[rng.IntN(3)]
		next.Limits[i] = drawLimit(rng, Counter{FixedWindow, p})
	case r == 8 || len(next.Limits) == 1: // re-count: another period or algorithm
		others := slices.Delete(slices.Clone(next.Limits), i, i+1)
		if l := drawLimits(rng, 1, windowed, others); len(l) == 1 {
			next.Limits[i] = l[0]
		}
	case rng.IntN(2) == 0 && len(next.Limits) < 3: // another limit
		next.Limits = append(next.Limits, drawLimits(rng, 1, windowed, next.Limits)...)
	default: // one limit fewer
		next.Limits = slices.Delete(next.Limits, i, i+1)
	}
	dedupeNames(next.Limits)
	return next
}

// dedupeNames leaves a name to the first limit that bears it: names are
// unique in a domain.
func dedupeNames(limits []Limit) {
	seen := map[string]bool{}
	for i, l := range limits {
		if seen[l.Name] {
			limits[i].Name = ""
		}
		if l.Name != "" {
			seen[l.Name] = true
		}
	}
}
