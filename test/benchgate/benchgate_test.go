package benchgate

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

var (
	benchGate  = flag.Bool("bench-gate", false, "run the live gate benchmark (make bench-gate); skipped otherwise")
	tableOut   = flag.String("bench-gate-out", "", "file the table is written to as well")
	binFlag    = flag.String("bench-gate-bin", "", "a throttlekit binary to measure instead of this tree's (another commit's, say)")
	traceFlag  = flag.Bool("bench-gate-trace", false, "log every sidecar's limit (and a fleet's L_local, share and L_global) every 100 ms of the run, warm-up included")
	roundsFlag = flag.Int("bench-gate-rounds", 3, "how many times every row runs, interleaved; the table shows each row's median round")
	aggFlag    = flag.String("bench-gate-aggregate", "", "the coordinated fleet's aggregate (min, median, mean); empty: the default")
)

// The benchmark's shape: a backend whose latency doubles past knee in
// flight, clients closed-loop clients (a refused one asks again after
// retry, Envoy's default retry base interval), warm before the measured
// phase of measure.
const (
	knee    = 40
	base    = 50 * time.Millisecond
	clients = 80
	retry   = 25 * time.Millisecond
	warm    = 6 * time.Second
	measure = 10 * time.Second
	// heartbeat is the coordinated fleet's (lease: two of them).
	heartbeat = 200 * time.Millisecond
	// fleet is how many coordinated sidecars share the backend.
	fleet = 4
	// globalEvery is how often a fleet's L_global is read (one sidecar's
	// /metrics).
	globalEvery = 100 * time.Millisecond
)

// setup is one row: a gate (empty: none) on one sidecar or a fleet.
type setup struct {
	name     string
	sidecars int
	gate     string // the gate's controller line and limits; "" for no gate
}

// result is what a row measured.
type result struct {
	setup
	// spread is the lowest and highest goodput of the row's rounds, and
	// ratios, for a fleet, its goodput over one sidecar's in each round;
	// set by medianRows.
	spread   [2]float64
	ratios   []float64
	goodput  float64 // served a second, as a fraction of the backend's ideal
	p99      time.Duration
	inflight float64 // the backend's mean in flight
	refused  float64 // refused a second
	// global is the fleet's ceiling L_global as one sidecar's /metrics
	// showed it every globalEvery of the measured phase; nil for one
	// sidecar.
	global []int
}

// TestBenchGate runs every setup and prints the table. It is a benchmark,
// not a test: it asserts nothing of the figures (the Done-when bars are
// printed under the table), only that every request was answered.
func TestBenchGate(t *testing.T) {
	if !*benchGate {
		t.Skip("a benchmark: make bench-gate (go test -run TestBenchGate ./test/benchgate -args -bench-gate)")
	}
	if *roundsFlag < 1 {
		t.Fatalf("-bench-gate-rounds %d: at least one round", *roundsFlag)
	}
	bin := *binFlag
	if bin == "" {
		root, err := testenv.ModuleRoot()
		if err != nil {
			t.Fatal(err)
		}
		if bin, err = testenv.BuildSidecar(root, t.TempDir(), false); err != nil {
			t.Fatal(err)
		}
	}
	static := fmt.Sprintf("controller: aimd\n    min_limit: %d\n    max_limit: %d\n    initial_limit: %d", knee, knee, knee)
	setups := []setup{{name: "no gate", sidecars: 1}, {name: fmt.Sprintf("static %d", knee), sidecars: 1, gate: static},
		{name: fmt.Sprintf("static %d", knee), sidecars: fleet, gate: static}}
	for _, c := range []string{"gradient2", "aimd", "vegas", "p95"} {
		line := "controller: " + c
		if c == "p95" { // its one required parameter: the latency to hold
			line += fmt.Sprintf("\n    params: {target: %v}", 2*base)
		}
		setups = append(setups, setup{name: c, sidecars: 1, gate: line}, setup{name: c, sidecars: fleet, gate: line})
	}
	// rounds[i][k] is setup k's result in round i: every round runs every
	// setup in turn, so a slow minute of the machine falls on every row
	// alike, not on one controller's.
	var rounds [][]result
	for i := range *roundsFlag {
		var round []result
		for _, s := range setups {
			t.Run(fmt.Sprintf("round-%d/%s/%d", i+1, strings.ReplaceAll(s.name, " ", "-"), s.sidecars), func(t *testing.T) {
				r := runSetup(t, bin, s)
				t.Logf("%s × %d: goodput %.2f of ideal, p99 %v, backend in flight %.1f, refused %.0f/s, L_global %s",
					s.name, s.sidecars, r.goodput, r.p99, r.inflight, r.refused, globalSummary(r.global))
				round = append(round, r)
			})
		}
		if len(round) > 0 {
			rounds = append(rounds, round)
		}
	}
	rows := medianRows(rounds)
	table := formatTable(rows)
	fmt.Print(table)
	if *tableOut != "" {
		if err := os.WriteFile(*tableOut, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// policy is gates.yaml for s: one gate on every path, distributed over
// Redis when s is a fleet.
func policy(s setup) string {
	if s.gate == "" { // a gate on a path no client asks for: the same sidecar, gating nothing
		return "concurrency:\n  - name: elsewhere\n    match: {path_prefix: /elsewhere}\n"
	}
	p := "concurrency:\n  - name: backend\n    match: {path_prefix: /}\n    " + s.gate + "\n"
	if s.sidecars > 1 {
		agg := ""
		if *aggFlag != "" {
			agg = ", aggregate: " + *aggFlag
		}
		p += fmt.Sprintf("    distributed: {coordinator: redis, heartbeat: %v, acknowledged_handoff: true, eager: true%s}\n", heartbeat, agg)
	}
	return p
}

// runSetup starts s's sidecars (over a Redis of their own when a fleet) in
// front of a fresh backend, runs the clients, and measures.
func runSetup(t *testing.T, bin string, s setup) result {
	b := newKneeBackend(t, knee, base)
	var args []string
	if s.sidecars > 1 {
		args = []string{"--store", "redis", "--redis-url", testenv.StartRedis(t).URL()}
	}
	var procs []extprocv3.ExternalProcessorClient
	var scs []*sidecar
	for i := range s.sidecars {
		sc := startSidecar(t, bin, policy(s), append(slices.Clone(args), "--node-id", fmt.Sprintf("node-%d", i))...)
		procs = append(procs, extprocv3.NewExternalProcessorClient(sc.conn))
		scs = append(scs, sc)
	}
	defer func() {
		for _, sc := range scs {
			t.Logf("%v: %s", sc, sc.gateState())
		}
	}()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxIdleConns: clients}}
	defer hc.CloseIdleConnections()

	ctx, stop := context.WithCancel(context.Background())
	var (
		wg              sync.WaitGroup
		measuring       atomic.Bool
		nServed, nRefus atomic.Int64
		nFailed         atomic.Int64
		lastErr         atomic.Value
		mu              sync.Mutex
		lat             []time.Duration
	)
	for i := range clients {
		c := procs[i%len(procs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			defer func() { mu.Lock(); lat = append(lat, mine...); mu.Unlock() }()
			for ctx.Err() == nil {
				start := time.Now()
				o, err := request(ctx, c, hc, b.srv.URL+"/work")
				if ctx.Err() != nil {
					return
				}
				m := measuring.Load()
				switch o {
				case served:
					if m {
						nServed.Add(1)
						mine = append(mine, time.Since(start))
					}
				case refused:
					if m {
						nRefus.Add(1)
					}
					backoff(ctx, retry)
				default:
					nFailed.Add(1)
					lastErr.Store(err)
				}
			}
		}()
	}
	var global []int // L_global over the measured phase, for a fleet
	if s.sidecars > 1 || *traceFlag && s.gate != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(globalEvery)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				first, err := scs[0].gauges() // one scrape for the table and the trace
				if g, ok := gaugeValue(first, "fleet_global_limit"); err == nil && ok && measuring.Load() && s.sidecars > 1 {
					mu.Lock()
					global = append(global, int(g))
					mu.Unlock()
				}
				if *traceFlag {
					line := []string{formatGauges(first, err)}
					for _, sc := range scs[1:] {
						line = append(line, sc.gateState())
					}
					phase := "warm"
					if measuring.Load() {
						phase = "measured"
					}
					t.Logf("%s: %d in backend | %s", phase, b.inflight.Load(), strings.Join(line, " | "))
				}
			}
		}()
	}
	sampler := time.NewTicker(10 * time.Millisecond)
	defer sampler.Stop()
	phase := time.NewTimer(warm)
	var began time.Time
loop:
	for {
		select {
		case <-sampler.C:
			b.sample()
		case <-phase.C:
			if began.IsZero() {
				began = time.Now()
				measuring.Store(true)
				b.sampling.Store(true)
				phase.Reset(measure)
				continue
			}
			break loop
		}
	}
	measuring.Store(false)
	b.sampling.Store(false)
	took := time.Since(began).Seconds()
	stop()
	wg.Wait()
	if n := nFailed.Load(); n > 0 {
		t.Errorf("%d requests failed; the last: %v", n, lastErr.Load())
	}
	slices.Sort(lat)
	r := result{setup: s, inflight: b.meanInflight(), refused: float64(nRefus.Load()) / took, global: global,
		goodput: float64(nServed.Load()) / took / b.ideal()}
	if len(lat) > 0 {
		r.p99 = lat[(len(lat)*99)/100]
	}
	return r
}

// medianRows is each setup's median round by goodput (the lower middle
// one of an even count), with the spread of its rounds and, for a fleet,
// its goodput over the one-sidecar row's of the same name in each round.
// A setup missing from a round (its subtest was filtered out or failed)
// drops the rounds after that one for it.
func medianRows(rounds [][]result) []result {
	if len(rounds) == 0 {
		return nil
	}
	var rows []result
	for k := range rounds[0] {
		var rs []result
		for _, round := range rounds {
			if k < len(round) && round[k].setup == rounds[0][k].setup {
				rs = append(rs, round[k])
			}
		}
		slices.SortFunc(rs, func(a, b result) int { return cmp.Compare(a.goodput, b.goodput) })
		m := rs[(len(rs)-1)/2]
		m.spread = [2]float64{rs[0].goodput, rs[len(rs)-1].goodput}
		if m.sidecars > 1 {
			for _, round := range rounds {
				var one, four float64
				for _, r := range round {
					switch {
					case r.name == m.name && r.sidecars == 1:
						one = r.goodput
					case r.setup == m.setup:
						four = r.goodput
					}
				}
				if one > 0 && four > 0 {
					m.ratios = append(m.ratios, four/one)
				}
			}
		}
		rows = append(rows, m)
	}
	return rows
}

// formatTable is the markdown table of rows, and the Done-when bars of
// issue 34 for each controller.
func formatTable(rows []result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "backend: latency %v up to %d in flight, doubling past it (ideal goodput %.0f/s); %d closed-loop clients, a refused one retries after %v; %v measured after %v\n\n",
		base, knee, float64(knee)/base.Seconds(), clients, retry, measure, warm)
	fmt.Fprintf(&sb, "Each row is its median round of %d by goodput (every round runs every row in turn); the goodput's range over the rounds beside it.\n\n", *roundsFlag)
	sb.WriteString("| gate | sidecars | goodput (of ideal) | rounds' range | p99 | backend in flight (mean) | refused/s | L_global mean (range, falls) |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %d | %.2f | %.2f–%.2f | %v | %.1f | %.0f | %s |\n", r.name, r.sidecars, r.goodput, r.spread[0], r.spread[1],
			r.p99.Round(time.Millisecond), r.inflight, r.refused, globalSummary(r.global))
	}
	sb.WriteString("\n")
	one := map[string]result{}
	for _, r := range rows {
		if r.sidecars == 1 {
			one[r.name] = r
		}
	}
	for _, r := range rows {
		o, ok := one[r.name]
		if r.sidecars == 1 || !ok || o.goodput == 0 || o.inflight == 0 {
			continue
		}
		per := make([]string, len(r.ratios))
		for i, x := range r.ratios {
			per[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Fprintf(&sb, "- %s: one sidecar %.2f of ideal (bar ≥ 0.80: %s); %d coordinated %.2f× its goodput (bar ≥ 0.9: %s; round by round %s), backend in flight %.2f× (bar ≤ 1.25: %s)\n",
			r.name, o.goodput, verdict(o.goodput >= 0.8), r.sidecars, r.goodput/o.goodput, verdict(r.goodput >= 0.9*o.goodput),
			strings.Join(per, ", "), r.inflight/o.inflight, verdict(r.inflight <= 1.25*o.inflight))
	}
	return sb.String()
}

// globalSummary is L_global's mean, range and falls over the samples, or
// "—" for none.
func globalSummary(g []int) string {
	if len(g) == 0 {
		return "—"
	}
	sum, lo, hi, falls := 0, g[0], g[0], 0
	for i, v := range g {
		sum += v
		lo, hi = min(lo, v), max(hi, v)
		if i > 0 && v < g[i-1] {
			falls++
		}
	}
	return fmt.Sprintf("%.1f (%d–%d, %d falls)", float64(sum)/float64(len(g)), lo, hi, falls)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
