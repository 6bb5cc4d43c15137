package boundcheck

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// The federated checker (issue 40) drives federation.Region the way serve
// runs it: 1–4 regions, each of 1–3 processes, every process a leased,
// window-coupled gale.Limiter over a Region of its own (its own coordinator
// health, reconciles and regional-budget records), a region's processes
// sharing its escrow and the store its regional budget is counted on. One
// coordinator serves them all. Its clock is the reference: a schedule's
// instants are on it, and every window is judged on it. A region's escrow
// and regional budget read the region's Redis clock (serve runs both on
// --redis-url, on its TIME), offset from the coordinator's by the region's
// skew; each process stamps its checks with its own clock, offset by its
// skew. Cuts take the coordinator away from some regions for a span: every
// call fails, as through a partition, or lands and loses its reply.

// FedRegion is one region of a federated schedule.
type FedRegion struct {
	Outage federation.Outage
	// RegionalLimit is regional_only's budget per window (1..Limit).
	RegionalLimit int64
	// Escrow says whether the region's processes share an escrow (always
	// with regional_only, which counts its budget on the same Redis).
	Escrow bool
	// Batch is the least a lease from the coordinator asks (the policy's
	// federation batch); ProcBatch a process's lease from its region.
	Batch, ProcBatch int64
	// Skew is the region's Redis clock less the coordinator's.
	Skew time.Duration
	// Procs is each process's clock less the coordinator's.
	Procs []time.Duration
}

// FedSpec is a federated schedule's rule and fleet: a fixed window of Limit
// units per Window, shared by Regions.
type FedSpec struct {
	Limit int64
	// ProbeAfter is every region's federation.RegionConfig.ProbeAfter.
	ProbeAfter time.Duration
	Regions    []FedRegion
}

// Cut is a span of the coordinator's clock, [From, To) since Start, in
// which it does not answer the regions whose bits Regions sets (bit r:
// region r): every lease, reconcile and probe fails. With Lands the calls
// reach it and only their replies are lost: a lease is counted, and the
// caller is told it failed.
type Cut struct {
	From, To time.Duration
	Regions  uint8
	Lands    bool
}

// FedKind is what a federated step does.
type FedKind uint8

const (
	// FedCheck asks Cost units of process Proc of region Region.
	FedCheck FedKind = iota
	// FedReload replaces the process's limiter and Region as a reload that
	// re-figures the rule does: the old limiter gives its credits back, and
	// the new Region keeps the rule's RuleState and the coordinator's
	// Health.
	FedReload
	// FedRestart replaces the process with a new one: its limiter gives its
	// credits back, and the new process starts with nothing (its old
	// reconciles dropped, the coordinator healthy until it fails it).
	FedRestart
)

func (k FedKind) String() string {
	return [...]string{"check", "reload", "restart"}[k]
}

// FedStep is one event of a federated schedule, at At since Start on the
// coordinator's clock (a process stamps its checks with its own).
type FedStep struct {
	At           time.Duration
	Kind         FedKind
	Region, Proc int
	Cost         int64
}

// FedSchedule is a federated spec, its cuts and its steps, in time order.
type FedSchedule struct {
	Seed uint64
	Spec FedSpec
	// Steady schedules repeat one window's checks (one unit each) in every
	// window, with no cut: where the least a window admits is judged.
	Steady bool
	Cuts   []Cut
	Steps  []FedStep
}

// GenerateFederation draws a federated schedule from seed: a limit of 1–40
// per Window; 1–4 regions of 1–3 processes, each region fail_closed or
// regional_only (its regional limit 1..Limit, or its static slice of it),
// with its own batches and, in most seeds, every region's Redis and every
// process on a clock up to 500 ms either side of the coordinator's; and
// 3–6 windows of checks (costs of 1 and more, a fifth of them within
// 600 ms of a boundary and a few within 2 µs of one, and now and then a
// process reloaded or restarted), with up to three cuts: over whole
// windows, over spans of any length, or brief, from every region or some,
// a quarter of them landing with their replies lost. Half the seeds are
// steady instead: one window's checks of one unit repeated, and no cut.
func GenerateFederation(seed uint64) FedSchedule {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	sc := FedSchedule{Seed: seed}
	sp := &sc.Spec
	sp.Limit = 1 + rng.Int64N(40)
	sp.ProbeAfter = federation.DefaultProbeAfter
	if rng.IntN(3) == 0 {
		sp.ProbeAfter = time.Duration(100+rng.Int64N(2900)) * time.Millisecond
	}
	skewed := rng.IntN(4) != 0
	skew := func() time.Duration {
		if !skewed || rng.IntN(4) == 0 {
			return 0
		}
		return time.Duration(rng.Int64N(1001)-500) * time.Millisecond
	}
	k := 1 + rng.IntN(4)
	static, _ := federation.Partition(sp.Limit, k) // nil when the limit has fewer units than regions
	for r := range k {
		reg := FedRegion{Batch: 1 + rng.Int64N(sp.Limit), Escrow: rng.IntN(4) != 0, Skew: skew()}
		if rng.IntN(3) == 0 {
			reg.Batch = max(1, sp.Limit/10) // serve's default
		}
		if rng.IntN(2) == 0 {
			reg.Outage, reg.Escrow = federation.RegionalOnly, true
			reg.RegionalLimit = 1 + rng.Int64N(sp.Limit)
			if static != nil && rng.IntN(2) == 0 {
				reg.RegionalLimit = static[r]
			}
		}
		reg.ProcBatch = reg.Batch // serve: a quarter of the region's batch with an escrow
		if reg.Escrow {
			reg.ProcBatch = max(1, reg.Batch/4)
		}
		if rng.IntN(4) == 0 {
			reg.ProcBatch = 1 + rng.Int64N(sp.Limit)
		}
		for range 1 + rng.IntN(3) {
			reg.Procs = append(reg.Procs, skew())
		}
		sp.Regions = append(sp.Regions, reg)
	}
	windows := 3 + rng.IntN(4)
	step := func(at time.Duration) FedStep {
		r := rng.IntN(k)
		return FedStep{At: at, Region: r, Proc: rng.IntN(len(sp.Regions[r].Procs)), Cost: 1}
	}
	calls := func() int { return 1 + rng.IntN(int(3*sp.Limit)+5) }
	if rng.IntN(2) == 0 {
		sc.Steady = true
		var one []FedStep
		for range calls() {
			one = append(one, step(time.Duration(rng.Int64N(int64(Window)))))
		}
		for w := range windows {
			for _, c := range one {
				c.At += time.Duration(w) * Window
				sc.Steps = append(sc.Steps, c)
			}
		}
		sortFedSteps(&sc)
		return sc
	}
	end := time.Duration(windows) * Window
	for w := range windows {
		start := time.Duration(w) * Window
		for range calls() {
			at := start + time.Duration(rng.Int64N(int64(Window)))
			switch rng.IntN(16) {
			case 0, 1, 2: // about a boundary, where skewed clocks disagree
				at = start + time.Duration(rng.Int64N(int64(1200*time.Millisecond))) - 600*time.Millisecond
			case 3: // within two microseconds of it, where the stores round
				at = start + time.Duration(rng.Int64N(4000)) - 2000
			}
			st := step(max(at, 0))
			switch n := rng.IntN(40); {
			case n == 0:
				st.Kind, st.Cost = FedReload, 0
			case n == 1:
				st.Kind, st.Cost = FedRestart, 0
			case n < 12:
				st.Cost = 1 + rng.Int64N(max(1, sp.Limit/3))
			}
			sc.Steps = append(sc.Steps, st)
		}
	}
	for range rng.IntN(4) {
		var c Cut
		switch rng.IntN(3) {
		case 0: // over whole windows, begun and ended about their boundaries
			w := 1 + rng.IntN(windows-1)
			c.From = time.Duration(w)*Window - time.Duration(rng.Int64N(int64(time.Second)))
			c.To = time.Duration(w+1+rng.IntN(2))*Window + time.Duration(rng.Int64N(int64(time.Second)))
		case 1:
			c.From = time.Duration(rng.Int64N(int64(end)))
			c.To = c.From + time.Duration(1+rng.Int64N(int64(3*Window/2)))
		default:
			c.From = time.Duration(rng.Int64N(int64(end)))
			c.To = c.From + time.Duration(1+rng.Int64N(int64(300*time.Millisecond)))
		}
		c.Regions = 1<<k - 1
		if k > 1 && rng.IntN(3) == 0 {
			c.Regions = uint8(1 + rng.IntN(1<<k-1)) // a partition: some regions
		}
		c.Lands = rng.IntN(4) == 0
		sc.Cuts = append(sc.Cuts, c)
	}
	sortFedSteps(&sc)
	return sc
}

// sortFedSteps orders sc's steps by time, stably.
func sortFedSteps(sc *FedSchedule) {
	slices.SortStableFunc(sc.Steps, func(a, b FedStep) int { return cmp.Compare(a.At, b.At) })
}

func (reg FedRegion) String() string {
	var b strings.Builder
	b.WriteString(reg.Outage.String())
	if reg.Outage == federation.RegionalOnly {
		fmt.Fprintf(&b, " (regional_limit %d)", reg.RegionalLimit)
	}
	if reg.Escrow {
		b.WriteString(", escrow")
	} else {
		b.WriteString(", no escrow")
	}
	fmt.Fprintf(&b, ", batch %d, process batch %d, clock %+v, processes' clocks %v", reg.Batch, reg.ProcBatch, reg.Skew, reg.Procs)
	return b.String()
}

func (c Cut) String() string {
	var regions []int
	for r := range 8 {
		if c.Regions&(1<<r) != 0 {
			regions = append(regions, r)
		}
	}
	s := fmt.Sprintf("cut [%v, %v) from regions %v", c.From, c.To, regions)
	if c.Lands {
		s += ", calls landing, replies lost"
	}
	return s
}

func (st FedStep) String() string {
	if st.Kind != FedCheck {
		return fmt.Sprintf("%v r%d/p%d %v", st.At, st.Region, st.Proc, st.Kind)
	}
	return fmt.Sprintf("%v r%d/p%d cost %d", st.At, st.Region, st.Proc, st.Cost)
}

func (sc FedSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: limit %d per %v, probe after %v, steady %v\n", sc.Seed, sc.Spec.Limit, Window, sc.Spec.ProbeAfter, sc.Steady)
	for r, reg := range sc.Spec.Regions {
		fmt.Fprintf(&b, "  region %d: %v\n", r, reg)
	}
	for _, c := range sc.Cuts {
		fmt.Fprintf(&b, "  %v\n", c)
	}
	for i, c := range sc.Steps {
		fmt.Fprintf(&b, "  #%d %v\n", i, c)
	}
	return b.String()
}

// GoString is sc as a Go literal, to keep as a regression.
func (sc FedSchedule) GoString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "FedSchedule{Seed: %d, Steady: %v, Spec: FedSpec{Limit: %d, ProbeAfter: %s, Regions: []FedRegion{\n", sc.Seed, sc.Steady, sc.Spec.Limit, goDuration(sc.Spec.ProbeAfter))
	for _, reg := range sc.Spec.Regions {
		outage := "federation.FailClosed"
		if reg.Outage == federation.RegionalOnly {
			outage = "federation.RegionalOnly"
		}
		procs := make([]string, len(reg.Procs))
		for i, d := range reg.Procs {
			procs[i] = goDuration(d)
		}
		fmt.Fprintf(&b, "\t{Outage: %s, RegionalLimit: %d, Escrow: %v, Batch: %d, ProcBatch: %d, Skew: %s, Procs: []time.Duration{%s}},\n",
			outage, reg.RegionalLimit, reg.Escrow, reg.Batch, reg.ProcBatch, goDuration(reg.Skew), strings.Join(procs, ", "))
	}
	b.WriteString("}}, Cuts: []Cut{\n")
	for _, c := range sc.Cuts {
		fmt.Fprintf(&b, "\t{From: %s, To: %s, Regions: %#b, Lands: %v},\n", goDuration(c.From), goDuration(c.To), c.Regions, c.Lands)
	}
	b.WriteString("}, Steps: []FedStep{\n")
	for _, st := range sc.Steps {
		kind := ""
		switch st.Kind {
		case FedReload:
			kind = "Kind: FedReload, "
		case FedRestart:
			kind = "Kind: FedRestart, "
		}
		fmt.Fprintf(&b, "\t{At: %s, %sRegion: %d, Proc: %d, Cost: %d},\n", goDuration(st.At), kind, st.Region, st.Proc, st.Cost)
	}
	b.WriteString("}}")
	return b.String()
}

// goDuration is d as a Go expression.
func goDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%d * time.Millisecond", d/time.Millisecond)
	}
	return fmt.Sprintf("%d", int64(d))
}
