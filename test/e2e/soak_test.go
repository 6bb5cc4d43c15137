package e2e

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

var (
	soakFor = flag.Duration("soak", 0, "how long TestE2ESoak runs (make soak: 10m); 0 is the 60 s version make test runs")
	soakOut = flag.String("soak-out", "", "write TestE2ESoak's per-minute table, samples (CSV) and chart to this directory")
)

// The soak's traffic and faults.
const (
	soakShort       = 60 * time.Second
	soakKeys        = 100_000 // zipf-distributed descriptor values
	soakZipfS       = 1.1     // zipf exponent: a few hot keys, a long tail
	soakWorkers     = 4
	soakLimit       = 100 // per key per minute
	soakReloadEvery = 5 * time.Second
	soakRedisDown   = 2 * time.Second   // how long each restart leaves Redis dead
	soakSpike       = 3 * time.Second   // how long each latency spike lasts
	soakSpikeDelay  = 2 * soakStoreTime // the spike: 2× the soak's store timeout
	soakStoreTime   = slackStoreTimeout // --store-timeout: what the soak judges outside faults is that no call fails, so a loaded machine must not miss it (250 ms failed a call beside a second make test)
	soakGrace       = 3 * time.Second   // errors may trail a fault this long (reconnects, probes)
	soakReady       = 5 * time.Second   // throttlekit_store_up 1 again after Redis restarts
)

var soakModes = []string{"strict", "cached_deny", "leased", "leased_uncoupled", "fair"}

// soakPolicy is the domain "soak": one rule per mode on descriptor key
// MODE, limiting each value to soakLimit a minute (leased's limit is
// leasedLimit: the reloads change it), every one answering UNAVAILABLE
// when the store fails, so that errors show when Redis is down or slow.
// Leased keys idle for 10 s go back to the store, so L1 holds the keys of
// the last seconds, not every key ever seen: its size levels off.
func soakPolicy(leasedLimit int) string {
	var b strings.Builder
	b.WriteString("domain: soak\ndescriptors:\n")
	for _, m := range soakModes {
		limit := soakLimit
		if m == "leased" {
			limit = leasedLimit
		}
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {name: %s, unit: minute, requests_per_unit: %d}\n    on_store_error: error\n", m, m, limit)
		switch m {
		case "cached_deny":
			b.WriteString("    mode: cached_deny\n")
		case "leased":
			b.WriteString("    mode: leased\n    lease: {batch: 10, return_idle_after: 10s}\n")
		case "leased_uncoupled":
			b.WriteString("    mode: leased\n    lease: {batch: 10, window_coupled: false, return_idle_after: 10s}\n")
		case "fair":
			b.WriteString("    fairness: {tenant_key: fair}\n")
		}
	}
	return b.String()
}

// soakEvent is one fault of the schedule, at an offset from the start.
type soakEvent struct {
	at   time.Duration
	kind string // "restart" (Redis killed, restarted soakRedisDown later) or "spike"
}

// soakSchedule is the faults of a soak of d: at full length (d ≥ 3 min) a
// Redis restart every 60 s and a latency spike every 90 s, as the issue
// asks; shorter, both every d/2, so the 60 s version has two of each. A
// spike due within 10 s of a restart moves 10 s later, so each fault's
// errors are its own. Reloads are every soakReloadEvery at any length.
func soakSchedule(d time.Duration) []soakEvent {
	restartEvery, spikeEvery := time.Minute, 90*time.Second
	if d < 3*time.Minute {
		restartEvery, spikeEvery = d/2, d/2
	}
	var ev []soakEvent
	var restarts []time.Duration
	for at := restartEvery / 2; at+soakRedisDown < d; at += restartEvery {
		ev = append(ev, soakEvent{at, "restart"})
		restarts = append(restarts, at)
	}
	for at := spikeEvery / 2; at < d; at += spikeEvery {
		s := at
		for _, r := range restarts {
			if s > r-10*time.Second && s < r+10*time.Second {
				s = r + 10*time.Second
			}
		}
		if s+soakSpike < d {
			ev = append(ev, soakEvent{s, "spike"})
		}
	}
	// In time order: TestE2ESoak begins the faults from the front, so a
	// spike listed after a later restart would wait for it and overlap it.
	slices.SortFunc(ev, func(a, b soakEvent) int { return cmp.Compare(a.at, b.at) })
	return ev
}

// soakCounts are the traffic's answers and errors so far.
type soakCounts struct {
	answers, errors atomic.Int64
	lastErr         atomic.Value // string: the latest error, for the log
}

// soakTraffic asks the sidecar from soakWorkers goroutines until ctx ends:
// round robin over the modes, each value drawn from a zipf over soakKeys.
func soakTraffic(ctx context.Context, s *sidecar, c *soakCounts) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			zipf := rand.NewZipf(r, soakZipfS, 1, soakKeys-1)
			for i := 0; ctx.Err() == nil; i++ {
				mode := soakModes[(i+w)%len(soakModes)]
				cctx, cancel := context.WithTimeout(ctx, callDeadline)
				resp, err := s.rls.ShouldRateLimit(cctx, request("soak", desc(mode, fmt.Sprint("k", zipf.Uint64()))))
				cancel()
				switch {
				case ctx.Err() != nil:
				case err == nil && (resp.GetOverallCode() == ok || resp.GetOverallCode() == over):
					c.answers.Add(1)
				default:
					c.errors.Add(1)
					c.lastErr.Store(fmt.Sprintf("%s: %v %v", mode, resp.GetOverallCode(), err))
				}
			}
		}()
	}
	return &wg
}

// TestE2ESoak runs mixed traffic against a redis-backed sidecar for -soak
// (60 s by default; make soak runs 10 min) while the policy is reloaded
// every 5 s, Redis is killed and restarted and a latency spike is put
// between them on the schedule of soakSchedule, and samples the process
// every second. It asserts:
//   - RSS (the Go heap under -race) and goroutines do not trend upward
//     over the last half of the samples taken outside the faults (and
//     soakGrace after each): the Theil–Sen rise there stays within max(5% of
//     the median, a floor) — 8 MiB and 5 goroutines (checkFlat; TestSoakFlatCheck shows a leak
//     fails it). The slope, not a fixed ceiling: a leak shows as a climb
//     whatever the level, and the level depends on the race detector and
//     on the machine;
//   - every reload took (the success counter counted it within
//     reloadDeadline), none failed;
//   - throttlekit_store_up is 1 within soakReady of every Redis restart
//     (/readyz stays 200 through it: the sidecar answers);
//   - gRPC errors come only while a fault lasts or soakGrace after it;
//   - the sidecar neither panicked nor exited.
//
// With -soak-out it writes soak.md (the per-minute table; 10 s rows in the
// 60 s version), soak.csv and soak.png there.
func TestE2ESoak(t *testing.T) {
	t.Parallel()
	d := *soakFor
	if d == 0 {
		d = soakShort
	}
	r := testenv.StartRedis(t)
	proxy := testenv.StartProxy(t, r.Addr)
	s := startSidecar(t, options{store: "redis", redisURL: "redis://" + proxy.Addr + "/0",
		args:  []string{"--store-timeout", soakStoreTime.String()},
		files: map[string]string{"soak.yaml": soakPolicy(soakLimit)}})
	pid := s.cmd.Process.Pid

	var counts soakCounts
	ctx, stop := context.WithCancel(context.Background())
	traffic := soakTraffic(ctx, s, &counts)
	defer func() { stop(); traffic.Wait() }()

	schedule := soakSchedule(d)
	var (
		samples  []soakSample
		reloads  []time.Duration // when each rewrite was renamed into place
		faults   []soakFault     // when each fault began and ended
		ready    []time.Duration // how long store_up took to be 1 after each restart
		downAt   time.Duration   // when Redis was killed; 0 while it runs
		spikeAt  time.Duration   // when the spike began; 0 while none
		prevAns  int64
		prevErrs int64
	)
	m0 := s.metrics(t)
	success0 := m0.get("throttlekit_policy_reloads_total", "result", "success")
	begin := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for sec := 1; ; sec++ {
		<-tick.C
		now := time.Since(begin)
		var events []string
		// Faults whose span has passed end, then those due by now begin:
		// a fault never starts on top of one not yet ended.
		if downAt > 0 && now-downAt >= soakRedisDown {
			r.Restart()
			up := time.Since(begin)
			took, isReady, why := poll(soakReady, storeUp(t, s, 1))
			if !isReady {
				t.Errorf("restart at %v: throttlekit_store_up not 1 within %v of Redis answering again; last: %s", downAt.Round(time.Second), soakReady, why)
			}
			ready = append(ready, took)
			faults = append(faults, soakFault{"restart", downAt, up + took})
			downAt = 0
			events = append(events, "up")
		}
		if spikeAt > 0 && now-spikeAt >= soakSpike {
			proxy.Heal()
			if left := proxy.Toxics(); len(left) > 0 {
				t.Errorf("spike at %v: toxics %v left after Heal", spikeAt.Round(time.Second), left)
			}
			faults = append(faults, soakFault{"spike", spikeAt, time.Since(begin)})
			spikeAt = 0
			events = append(events, "healed")
		}
		for len(schedule) > 0 && schedule[0].at <= now {
			ev := schedule[0]
			schedule = schedule[1:]
			switch ev.kind {
			case "restart":
				r.Kill()
				downAt = now
			case "spike":
				proxy.Latency("downstream", soakSpikeDelay)
				spikeAt = now
			}
			events = append(events, ev.kind)
		}
		if now >= time.Duration(len(reloads)+1)*soakReloadEvery && now < d {
			testenv.WriteFileAtomic(t, filepath.Join(s.policyDir, "soak.yaml"), []byte(soakPolicy(soakLimit+1+len(reloads)%2)))
			reloads = append(reloads, time.Since(begin))
			events = append(events, "reload")
		}

		smp, err := sampleSidecar(s, pid)
		if err != nil {
			t.Fatalf("sampling the sidecar at %v: %v", now, err)
		}
		ans, errs := counts.answers.Load(), counts.errors.Load()
		smp.at, smp.answers, smp.errors, smp.events = time.Since(begin), ans-prevAns, errs-prevErrs, events
		prevAns, prevErrs = ans, errs
		samples = append(samples, smp)
		if time.Since(begin) >= d && downAt == 0 && spikeAt == 0 {
			break
		}
	}
	stop()
	traffic.Wait()

	// The reloads: each counted by the success counter within the deadline.
	for i, at := range reloads {
		took := time.Duration(-1)
		for _, smp := range samples {
			if smp.at >= at && smp.reloadsOK-success0 >= float64(i+1) {
				took = smp.at - at
				break
			}
		}
		if took < 0 || took > reloadDeadline {
			t.Errorf("reload %d (at %v): not counted as a success within %v (took %v)", i+1, at.Round(time.Millisecond), reloadDeadline, took)
		}
	}
	last := samples[len(samples)-1]
	if last.reloadsFailed > 0 {
		t.Errorf("%v reloads failed", last.reloadsFailed)
	}
	// Errors only during a fault, or soakGrace after it.
	var outside, answered int64
	for _, smp := range samples {
		if !inFault(faults, smp.at) {
			outside += smp.errors
			answered += smp.answers
		}
	}
	if outside > 0 {
		t.Errorf("%d errors outside the faults' spans (+%v), among %d answers; last error: %v", outside, soakGrace, answered, counts.lastErr.Load())
	}
	// The trends are read outside the faults' spans too: a spike holds
	// every call in flight for the store timeout, each a goroutine and its
	// buffers, and one that ends near the run's end (the 60 s soak's
	// second spike, 55–59 s on a loaded machine) read as a rise of 5.3
	// goroutines where 5 are allowed. A leak rises between the faults.
	var xs, rss, gor, heap []float64
	for _, smp := range samples {
		if inFault(faults, smp.at) {
			continue
		}
		xs, rss, gor, heap = append(xs, smp.at.Seconds()), append(rss, smp.rss), append(gor, smp.goroutines), append(heap, smp.heap)
	}
	// Under -race the binary's RSS climbs with the race detector's own
	// bookkeeping (0.5 MiB/s in a 60 s run whose Go heap stays flat at
	// 5–8 MiB): there the slope test reads the Go heap instead, and RSS
	// is reported.
	memName, mem := "RSS (bytes)", rss
	if raceBuild {
		memName, mem = "Go heap (bytes; RSS under -race grows with the detector's shadow memory)", heap
	}
	rssTrend, err := checkFlat(memName, xs, mem, rssGrowth)
	if err != nil {
		t.Error(err)
	}
	gorTrend, err := checkFlat("goroutines", xs, gor, goroutineGrowth)
	if err != nil {
		t.Error(err)
	}
	if log := s.log.String(); strings.Contains(log, "panic") {
		t.Errorf("the sidecar's log mentions a panic")
	}
	select {
	case <-s.exited:
		t.Errorf("the sidecar exited during the soak: %v", s.err)
	default:
	}

	table := soakTable(samples, d)
	t.Logf("soak of %v: %d answers, %d errors (%d outside faults), %d reloads, faults %v, store_up after restarts %v\n"+
		"last half: %s rise %.1f MiB (median %.1f MiB, allowed %.1f), goroutines rise %.1f (median %.0f, allowed %.1f)\n%s",
		d, counts.answers.Load(), counts.errors.Load(), outside, len(reloads), faults, ready,
		memName, rssTrend.rise()/(1<<20), rssTrend.median/(1<<20), rssGrowth.allowed(rssTrend.median)/(1<<20),
		gorTrend.rise(), gorTrend.median, goroutineGrowth.allowed(gorTrend.median), table)
	if *soakOut != "" {
		if err := writeSoakReport(*soakOut, samples, faults, table); err != nil {
			t.Fatal(err)
		}
	}
}

// soakFault is the span of one fault, from its start to the sidecar
// answering normally again (for a restart, throttlekit_store_up 1).
type soakFault struct {
	kind       string
	start, end time.Duration
}

func (f soakFault) String() string {
	return fmt.Sprintf("%s %.1f–%.1fs", f.kind, f.start.Seconds(), f.end.Seconds())
}

// inFault reports whether a sample taken at at (covering the second before
// it) overlaps a fault or the soakGrace after it.
func inFault(faults []soakFault, at time.Duration) bool {
	for _, f := range faults {
		if at > f.start && at-time.Second < f.end+soakGrace {
			return true
		}
	}
	return false
}

// TestSoakSchedule checks the faults TestE2ESoak runs: in time order, each
// begun at least 10 s after the one before (a restart's 2 s down, 5 s for
// /readyz and the soakGrace after a spike fit in that), and, in the 60 s
// version, two restarts and two spikes.
func TestSoakSchedule(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{soakShort, 3 * time.Minute, 10 * time.Minute, time.Hour} {
		ev := soakSchedule(d)
		kinds := map[string]int{}
		for i, e := range ev {
			kinds[e.kind]++
			if i > 0 && e.at < ev[i-1].at+10*time.Second {
				t.Errorf("soak of %v: %s at %v begins less than 10 s after %s at %v: %v", d, e.kind, e.at, ev[i-1].kind, ev[i-1].at, ev)
			}
			if e.at+soakSpike > d {
				t.Errorf("soak of %v: %s at %v ends after the soak", d, e.kind, e.at)
			}
		}
		if d == soakShort && (kinds["restart"] != 2 || kinds["spike"] != 2) {
			t.Errorf("soak of %v: %v, want two restarts and two spikes", d, ev)
		}
	}
}
