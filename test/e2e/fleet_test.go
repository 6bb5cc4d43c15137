package e2e

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// fleetChart, when set, is the directory TestE2EFleetGate writes its chart
// (fleet-gate.png) and samples (fleet-gate-*.csv) into: `make fleet-chart`.
var fleetChart = flag.String("fleet-chart", "", "directory for TestE2EFleetGate's chart and samples")

// The fleet scenario. A backend of true capacity fleetC serves each request
// in fleetBase while at most fleetC are in flight, and slows as
// (n/fleetC)² past it, where n counts the requests in flight at arrival:
// past its capacity, work queues. Four sidecars gate it; each has
// fleetWorkers closed-loop clients, together four times the capacity.
const (
	fleetC       = 12
	fleetBase    = 150 * time.Millisecond
	fleetSize    = 4
	fleetWorkers = 12
	// fleetHeartbeat is the distributed gate's heartbeat; its lease is the
	// default, two heartbeats.
	fleetHeartbeat = 200 * time.Millisecond
	fleetLease     = 2 * fleetHeartbeat
	// fleetWarm is how long the load runs before the ceiling is judged;
	// fleetSteady how long it is then sampled.
	fleetWarm   = 8 * time.Second
	fleetSteady = 6 * time.Second
	sampleEvery = 10 * time.Millisecond
	// fleetTarget is the p95 gate's target and fleetTolerance its hold
	// band's half-width, as a fraction of it: the gate rises while its
	// p95 is below target·(1 − tolerance), and falls above target·(1 +
	// tolerance). The band's floor leaves the path 0.7 × base (105 ms)
	// of overhead before a gate can no longer rise past C: room a
	// loaded machine's scheduling does not fill.
	fleetTarget    = 2 * fleetBase
	fleetTolerance = 0.15
)

// envoyBackoff is how long a client refused n times in a row waits before
// it asks again: Envoy's retry back-off, fully jittered exponential, in
// [0, (2ⁿ − 1) × 25 ms) capped at 250 ms (its default base interval and
// ten times it). A fixed 25 ms had the refused clients' calls, three in
// four, spin the two cores the sidecars and the backend share, and the
// latency the gates infer from was mostly scheduling.
func envoyBackoff(n int) time.Duration {
	const base, most = 25 * time.Millisecond, 250 * time.Millisecond
	limit := most
	if n < 4 {
		limit = time.Duration(1<<n-1) * base
	}
	return rand.N(limit) + time.Millisecond
}

// fleetGatePolicy is the gate every sidecar runs: a p95 controller whose
// target, 2 × the backend's base latency, is reached at about 1.3 × its
// capacity, with the floor and start an operator sizes for the backend
// (C/2 and 2C/3: one sidecar in front of it may always send that many).
// A fleet's gate beats eagerly: a sidecar whose share changed acknowledges
// it within a tenth of a heartbeat rather than at its next beat, so the
// shares a falling L_global reserves are freed that much sooner.
// coordinator is "" for independent sidecars: then each sidecar applies
// the floor and the start on its own, and the fleet's are four times them.
func fleetGatePolicy(coordinator string) string {
	p := fmt.Sprintf(`
concurrency:
  - name: backend
    match: {path_prefix: /}
    controller: p95
    min_limit: %d
    max_limit: 64
    initial_limit: %d
    params: {target: %v, tolerance: %v, window: 500ms, min_samples: 5, tick: 100ms, increase_step: 1, decrease_factor: 0.8, cooldown: 500ms}
`, fleetC/2, fleetC*2/3, fleetTarget, fleetTolerance)
	if coordinator != "" {
		p += fmt.Sprintf("    distributed: {coordinator: %s, heartbeat: %v, acknowledged_handoff: true, eager: true}\n", coordinator, fleetHeartbeat)
	}
	return p
}

// fleetSample is one instant of a run.
type fleetSample struct {
	at       time.Duration // since the load started
	inflight int           // in the backend
	global   int           // L_global by the coordinator's live records; 0 without one
	shares   int           // Σ share of the live records
	live     int
}

// fleetRun is what one run measured.
type fleetRun struct {
	name    string
	samples []fleetSample
	killAt  time.Duration // when a sidecar was killed; 0: none
	// deadEnd is when the killed sidecar's lease ended (its record's
	// expiry, as last read); handoff when the survivors' shares added up to
	// L_global. Both since the load started.
	deadEnd, handoff time.Duration
	// beats are the heartbeats the coordinator recorded; sampleGap the
	// longest gap between two samples (the sampler's own lateness).
	beats     beatLog
	sampleGap time.Duration
	// overhead is, for each request served in the steady phase, how much
	// longer than the backend's service time it took end to end.
	overhead durations
	calls    atomic.Int64
	refused  atomic.Int64
	failed   atomic.Int64
}

// records reads a gate's records from the coordinator the sidecars share.
type recordsFunc func(ctx context.Context) ([]distributed.Record, error)

// TestE2EFleetGate: four real `throttlekit serve` processes gate one
// backend of capacity C through one distributed gate; ext_proc clients
// play Envoy on every sidecar. With a coordinator (Redis, then PostgreSQL)
// the backend's in flight never exceeds the fleet's ceiling, the fleet
// keeps the backend at least 0.85 C busy on average (what one gate holding
// its target could, given the overhead the run measured), and killing a
// sidecar hands its share to the others. One sidecar with all the clients
// is the reference. The same four sidecars without a coordinator put well
// over C in flight.
func TestE2EFleetGate(t *testing.T) {
	var runs []*fleetRun
	t.Run("redis", func(t *testing.T) {
		rdb := testenv.StartRedis(t)
		coord, err := rediscoord.New(rdb.Client(), rediscoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, judgeFleet(t, func(prefix string) *fleetRun {
			return runFleet(t, "redis", fleetSize, prefix, options{store: "redis", redisURL: rdb.URL()},
				func(ctx context.Context) ([]distributed.Record, error) { return coord.Records(ctx, "backend") })
		}))
	})
	t.Run("postgres", func(t *testing.T) {
		pg := testenv.StartPostgres(t)
		pool := pg.Pool(t, func(*pgxpool.Config) {})
		coord, err := pgcoord.New(context.Background(), pool, pgcoord.Options{})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, judgeFleet(t, func(prefix string) *fleetRun {
			return runFleet(t, "postgres", fleetSize, prefix, options{store: "memory", args: []string{"--postgres-url", pg.URL()}},
				func(ctx context.Context) ([]distributed.Record, error) { return coord.Records(ctx, "backend") })
		}))
	})
	t.Run("single", func(t *testing.T) {
		r := runFleet(t, "", 1, "", options{store: "memory"}, nil)
		st := steady(r)
		t.Logf("single: one sidecar with all %d clients: backend in flight mean %.1f, p50 %d, max %d (C %d); overhead p95 %v; %d calls, %d refused",
			fleetSize*fleetWorkers, st.mean, st.p50, st.max, fleetC, r.overhead.quantile(0.95), r.calls.Load(), r.refused.Load())
		runs = append(runs, r)
	})
	t.Run("independent", func(t *testing.T) {
		r := runFleet(t, "", fleetSize, "", options{store: "memory"}, nil)
		st := steady(r)
		// Four floors admit 2 C at least, and 48 clients fill them. Where
		// the overhead measured leaves a gate room to rise (holdable), the
		// backend holds well over C on average, as no coordinated fleet
		// does. A loaded machine's overhead keeps each admitted request
		// out of the backend most of its time, and the mean then says
		// little; that the backend had more than 1.5 C in it at once (a
		// count: the coordinated fleets' ceilings stay under it on such a
		// machine) still shows the four gates uncoordinated.
		ovh := r.overhead.quantile(0.95)
		t.Logf("independent: backend in flight mean %.1f, p50 %d, max %d (C %d); overhead p95 %v; %d calls, %d refused",
			st.mean, st.p50, st.max, fleetC, ovh, r.calls.Load(), r.refused.Load())
		switch {
		case holdable(ovh) > 0 && st.mean < 1.5*fleetC:
			t.Fatalf("independent sidecars: mean in flight %.1f, want well above C %d (≥ 1.5 C)", st.mean, fleetC)
		case holdable(ovh) == 0 && st.max <= 1.5*fleetC:
			t.Fatalf("independent sidecars: at most %d in flight, want more than 1.5 C (C %d) at some instant (the overhead, p95 %v, too high to judge the mean at load %s)",
				st.max, fleetC, ovh, testenv.LoadAverage())
		case holdable(ovh) == 0:
			t.Logf("independent: the overhead (p95 %v) is too high to judge the mean at load %s; judged on the most in flight at once, %d (> 1.5 C)", ovh, testenv.LoadAverage(), st.max)
		}
		runs = append(runs, r)
	})
	if *fleetChart != "" && !t.Failed() {
		if err := writeFleetChart(*fleetChart, runs); err != nil {
			t.Fatal(err)
		}
	}
}

// judgeFleet runs a coordinated fleet (run starts its sidecars with node
// ids prefixed by prefix) and judges it with checkCoordinated. When the
// run's overhead left the gate no room to rise, so its goodput could not
// be judged, it runs the fleet again with fresh node ids (the last run's
// records expire meanwhile), up to judgeAttempts runs in all. It
// returns the last run.
func judgeFleet(t *testing.T, run func(prefix string) *fleetRun) *fleetRun {
	t.Helper()
	for attempt := 1; ; attempt++ {
		prefix := ""
		if attempt > 1 {
			prefix = fmt.Sprintf("again%d-", attempt)
		}
		r := run(prefix)
		if checkCoordinated(t, r, attempt == judgeAttempts) || t.Failed() {
			return r
		}
	}
}

// runFleet starts size sidecars with the fleet gate on coordinator (o
// says how they reach it; records reads its state, nil for none), gives
// them fleetSize × fleetWorkers clients in all, samples the backend and
// the coordinator, and kills the last sidecar halfway through the steady
// phase when there is a coordinator. Without one, the run is named
// "independent", or "single" for one sidecar. The sidecars' node ids are
// prefix and node-<i>; they are killed when the run ends.
func runFleet(t *testing.T, coordinator string, size int, prefix string, o options, records recordsFunc) *fleetRun {
	r := &fleetRun{name: coordinator}
	switch {
	case coordinator != "":
	case size == 1:
		r.name = "single"
	default:
		r.name = "independent"
	}
	b := newCapacityBackend(t, fleetC, fleetBase)
	var sidecars []*sidecar
	for i := range size {
		o := o
		id := fmt.Sprintf("%snode-%d", prefix, i)
		o.args = append([]string{"--node-id", id}, o.args...)
		o.files = map[string]string{"gates.yaml": fleetGatePolicy(coordinator)}
		s := startSidecar(t, o)
		s.nodeID = id
		sidecars = append(sidecars, s)
	}
	defer func() {
		for _, s := range sidecars {
			s.kill() // a run measured again must not share the backend or the coordinator with these
		}
	}()
	for _, s := range sidecars {
		waitFor(t, 10*time.Second, "the gate is loaded", func() (bool, string) {
			v := s.metrics(t).get("throttlekit_gate_limit", "gate", "backend")
			return v > 0, fmt.Sprintf("throttlekit_gate_limit{gate=backend} = %v", v)
		})
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, size)
	start := time.Now()
	for i, s := range sidecars {
		c := extprocv3.NewExternalProcessorClient(s.conn)
		sctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		for range fleetSize * fleetWorkers / size {
			wg.Add(1)
			go func() {
				defer wg.Done()
				refusals := 0 // in a row
				for sctx.Err() == nil {
					ir, over, err := fleetCall(sctx, c, b.srv.URL)
					r.calls.Add(1)
					if ir == nil {
						refusals = 0
					}
					switch {
					case err != nil && sctx.Err() == nil:
						r.failed.Add(1)
					case err != nil:
					case ir != nil:
						r.refused.Add(1)
						refusals++
						select { // a client told to retry backs off as Envoy's retries do
						case <-time.After(envoyBackoff(refusals)):
						case <-sctx.Done():
						}
					case time.Since(start) >= fleetWarm:
						r.overhead.add(over)
					}
				}
			}()
		}
	}

	end := start.Add(fleetWarm + fleetSteady)
	killAt := start.Add(fleetWarm + fleetSteady/2)
	var killed bool
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	last := start
	for range tick.C {
		// The sample's time is when it is taken, not when its tick fell
		// due: a loaded machine runs this loop late, and the ticker keeps
		// one stale tick, which dated a handoff before the kill.
		now := time.Now()
		if now.After(end) {
			break
		}
		r.sampleGap, last = max(r.sampleGap, now.Sub(last)), now
		smp := fleetSample{at: now.Sub(start), inflight: int(b.inflight.Load())}
		if records != nil {
			recs, err := records(ctx)
			if err != nil {
				t.Fatalf("reading the coordinator: %v", err)
			}
			for _, rec := range recs {
				r.beats.see(rec.Node, rec.ExpiresAt, fleetLease)
			}
			smp.global, smp.shares, smp.live = fleetState(recs, time.Now())
			if killed && r.handoff == 0 && handedOff(recs, sidecars[size-1].nodeID, start, r, smp) {
				r.handoff = smp.at
			}
		}
		r.samples = append(r.samples, smp)
		if records != nil && !killed && now.After(killAt) {
			killed = true
			cancels[size-1]() // its clients stop first: Envoy dies with its sidecar
			sidecars[size-1].kill()
			r.killAt = time.Since(start)
			// Its lease ends where its last record seen says. A late
			// sampler (a loaded machine fired this 10 ms ticker a second
			// late) may never see that record live again.
			if at, ok := r.beats.last[sidecars[size-1].nodeID]; ok {
				r.deadEnd = time.UnixMicro(at + fleetLease.Microseconds()).Sub(start)
			}
		}
	}
	stop()
	wg.Wait()
	if n := r.failed.Load(); n > 0 {
		t.Errorf("%s: %d ext_proc calls failed (of %d)", r.name, n, r.calls.Load())
	}
	return r
}

// handedOff reports whether the killed sidecar's share has reached the
// survivors in recs: its record is gone, each survivor has beaten since its
// lease ended (so its share was computed without it), and their shares add
// up to L_global, give or take a slot each (the ceiling moves between their
// beats). Until then it notes the dead record's lease end in r, from its
// record whenever the sampler sees it, live or expired.
func handedOff(recs []distributed.Record, dead string, start time.Time, r *fleetRun, smp fleetSample) bool {
	lease := fleetLease.Microseconds()
	for _, rec := range recs {
		if rec.Node == dead {
			r.deadEnd = max(r.deadEnd, time.UnixMicro(rec.ExpiresAt).Sub(start))
			if rec.ExpiresAt > start.UnixMicro()+smp.at.Microseconds() {
				return false
			}
		}
	}
	if r.deadEnd == 0 || smp.live != fleetSize-1 || smp.shares < smp.global-smp.live {
		return false
	}
	for _, rec := range recs {
		if rec.Node != dead && time.UnixMicro(rec.ExpiresAt-lease).Sub(start) < r.deadEnd {
			return false // not beaten since the dead lease ended
		}
	}
	return true
}

// fleetState is L_global (the mean of the live local limits, rounded
// down: the gate's aggregate, the default), Σ share and the live count of
// recs at now.
func fleetState(recs []distributed.Record, now time.Time) (global, shares, live int) {
	sum := 0
	for _, rec := range recs {
		if rec.ExpiresAt <= now.UnixMicro() {
			continue
		}
		live++
		sum += rec.Local
		shares += rec.Share
	}
	if live == 0 {
		return 0, shares, 0
	}
	return sum / live, shares, live
}

// steadyStats summarizes the backend's in flight over the steady phase,
// and L_global's saw: how often it fell and how far, and the samples where
// the backend held under half of it (the dips while a falling ceiling's
// reserved shares are handed back).
type steadyStats struct {
	mean       float64
	p50, max   int
	globalP50  int
	globalMean float64
	globalMin  int
	falls      int     // L_global's falls
	fallMean   float64 // their mean depth
	dips       int     // samples with the backend under half of L_global
	samples    int
}

func steady(r *fleetRun) steadyStats {
	var st steadyStats
	var in, globals []int
	prev := 0
	for _, s := range r.samples {
		if s.at < fleetWarm {
			prev = s.global
			continue
		}
		in = append(in, s.inflight)
		if s.global > 0 {
			globals = append(globals, s.global)
			st.globalMean += float64(s.global)
			if prev > s.global {
				st.falls++
				st.fallMean += float64(prev - s.global)
			}
			if 2*s.inflight < s.global {
				st.dips++
			}
			prev = s.global
		}
		st.mean += float64(s.inflight)
		st.max = max(st.max, s.inflight)
	}
	if len(in) == 0 {
		return st
	}
	st.samples = len(in)
	st.mean /= float64(len(in))
	sort.Ints(in)
	st.p50 = in[len(in)/2]
	if len(globals) > 0 {
		st.globalMean /= float64(len(globals))
		sort.Ints(globals)
		st.globalP50, st.globalMin = globals[len(globals)/2], globals[0]
	}
	if st.falls > 0 {
		st.fallMean /= float64(st.falls)
	}
	return st
}

// holdable is how many requests in flight a p95 gate of the fleet's
// policy holds on this backend when the path adds overhead to every
// request's latency, or 0 when it owes no number. The gate rises while its
// p95 is under target·(1 − tolerance), and the backend's latency at n in
// flight is base up to C and base·(n/C)² past it: with the overhead under
// target·(1 − tolerance) − base (105 ms) the gate rises past C, to about
// 1.3 C without overhead. With more, its p95 is in its band (or above)
// at any n: it holds where it is, or falls, as it should, and the backend's
// mean says nothing of the gate. A loaded machine's scheduling is such
// overhead.
func holdable(overhead time.Duration) float64 {
	room := float64(fleetTarget)*(1-fleetTolerance) - float64(overhead)
	if room < float64(fleetBase) {
		return 0
	}
	return fleetC * math.Sqrt(room/float64(fleetBase))
}

// checkCoordinated asserts a coordinated run. Every band comes from what
// the run measured, not from how fast a quiet machine is:
//   - at every sample after the first grant, the backend's in flight is at
//     most the fleet's ceiling: the highest L_global of the last lease and
//     longest heartbeat period measured (a ceiling that falls binds once
//     every sidecar has beaten since: Beat's bound);
//   - over the steady phase the backend holds no more than the gate's
//     upper band allows, and at least 0.85 of C when the overhead measured
//     leaves the gate room to rise past C (holdable); when it does not,
//     the run cannot judge that: it says so, naming the overhead, the
//     sampler's and the heartbeats' lateness and the machine's load, and
//     reports false, for judgeFleet to measure again, unless last, when
//     it fails;
//   - a killed sidecar's share reaches the others within two of the
//     longest heartbeat periods measured (and the sampler's own lateness)
//     of its lease's end: each survivor's next beat evicts it, and the one
//     after frees what the first beats still reserved.
func checkCoordinated(t *testing.T, r *fleetRun, last bool) (judged bool) {
	t.Helper()
	beat := max(r.beats.longest, fleetHeartbeat)
	var first time.Duration = -1
	var over, overNow int
	var worst string
	for i, s := range r.samples {
		if s.global == 0 {
			continue
		}
		if first < 0 {
			first = s.at
		}
		ceiling := s.global
		for j := i; j >= 0 && s.at-r.samples[j].at <= fleetLease+beat; j-- {
			ceiling = max(ceiling, r.samples[j].global)
		}
		if s.inflight > s.global {
			overNow++
		}
		if s.inflight > ceiling {
			over++
			if worst == "" {
				worst = fmt.Sprintf("at %v: %d in flight, ceiling %d (L_global now %d)", s.at, s.inflight, ceiling, s.global)
			}
		}
	}
	st := steady(r)
	overhead := r.overhead.quantile(0.95)
	lo := 0.85 * min(fleetC, holdable(overhead))
	judged = lo > 0
	hi := fleetC * math.Sqrt(float64(fleetTarget)*(1+fleetTolerance)/float64(fleetBase))
	handoffBound := 2*beat + r.sampleGap
	t.Logf("%s: %d samples; backend in flight over the steady phase mean %.1f (%.2f C), p50 %d, max %d; "+
		"L_global mean %.1f, p50 %d, lowest %d (C %d), %d falls of %.1f on average, %d samples with the backend under half of it; "+
		"samples above the instant's L_global %d, above the lease's highest %d; overhead p95 %v (bar %.1f); "+
		"longest heartbeat %v, sampler gap %v; the killed sidecar's share handed off %v after the kill, %v after its lease ended (bound %v); %d calls, %d refused",
		r.name, len(r.samples), st.mean, st.mean/fleetC, st.p50, st.max, st.globalMean, st.globalP50, st.globalMin, fleetC, st.falls, st.fallMean, st.dips,
		overNow, over, overhead, lo, r.beats.longest, r.sampleGap, r.handoff-r.killAt, r.handoff-r.deadEnd, handoffBound, r.calls.Load(), r.refused.Load())
	if first < 0 {
		t.Fatalf("%s: the coordinator never held a live record", r.name)
	}
	if over > 0 {
		t.Errorf("%s: %d samples with the backend's in flight above the fleet's ceiling; first %s", r.name, over, worst)
	}
	if !judged {
		room := time.Duration(float64(fleetTarget)*(1-fleetTolerance)) - fleetBase
		why := fmt.Sprintf("the path's overhead (p95 %v; the sampler's ticks up to %v apart, heartbeats up to %v) leaves the gate no room to rise past C (that needs under %v): "+
			"the machine (load %s) is too loaded to judge the backend's mean of %.1f", overhead, r.sampleGap, r.beats.longest, room, testenv.LoadAverage(), st.mean)
		if last {
			t.Errorf("%s: %s, and was in each of %d runs", r.name, why, judgeAttempts)
		} else {
			t.Logf("%s: %s; measuring again", r.name, why)
		}
	}
	if st.mean > hi || judged && st.mean < lo {
		t.Errorf("%s: the backend held %.1f in flight on average over the steady phase, want in [%.1f, %.1f] "+
			"(≥ 0.85 × min(C %d, what a p95 gate holds with the measured overhead p95 %v); ≤ where its latency leaves the band)",
			r.name, st.mean, lo, hi, fleetC, overhead)
	}
	switch {
	case r.killAt == 0 || r.handoff == 0:
		t.Errorf("%s: the killed sidecar's share never reached the others", r.name)
	case r.handoff-r.deadEnd > handoffBound:
		t.Errorf("%s: handoff %v after the killed sidecar's lease ended, want within two of the longest heartbeat periods measured and the sampler's gap (%v)",
			r.name, r.handoff-r.deadEnd, handoffBound)
	}
	return judged
}
