package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttlekit/throttlekit/internal/rlqsenvoy"
	"github.com/throttlekit/throttlekit/internal/testenv"
)

// The RLQS scenario (issue 33, Done when). One limit of rlqsL requests per
// 10 s window (unit second × unit_multiplier 10) over one Redis; two serve
// processes; eight emulated Envoys (internal/rlqsenvoy), four on each, each
// with both sidecars in its RLQS cluster (its own first). Demand is open
// loop: seven cold Envoys ask rlqsCold per window, the hot one five times
// that, 1.2 L in all. A static L/8 split would admit
// 7·min(cold, L/8) + min(hot, L/8) = (7·0.8 + 1)/8 = 82.5% of L.
const (
	rlqsL       = 400
	rlqsWindow  = 10 * time.Second
	rlqsEnvoys  = 8
	rlqsCold    = 0.8 * rlqsL / rlqsEnvoys // requests per window
	rlqsHot     = 5 * rlqsCold
	rlqsDomain  = "rlqs"
	rlqsWindows = 6 // full windows measured after the warm-up
	// rlqsWarm is the least warm-up before the first measured window: every
	// Envoy has subscribed and sent a periodic report (5 s) by then.
	rlqsWarm = 6 * time.Second
	// rlqsShare is the target for steady windows under skew.
	rlqsShare = 0.90
)

// rlqsServeArgs are the flags that make serve answer RLQS on its gRPC
// listener for rlqsDomain (pkg/rlqsserver, wired in cmd/sidecar).
var rlqsServeArgs = []string{"--rlqs"}

func rlqsPolicy() string {
	return fmt.Sprintf(`domain: %s
descriptors:
  - key: tenant
    rate_limit: {name: rlqs-tenant, unit: second, unit_multiplier: 10, requests_per_unit: %d}
`, rlqsDomain, rlqsL)
}

// storeClock maps the test's clock onto the store's (Redis TIME), whose
// windows the limit counts in.
type storeClock struct{ offset time.Duration }

func measureStoreClock(t *testing.T, r *testenv.Redis) storeClock {
	t.Helper()
	c := r.Client()
	best := time.Duration(math.MaxInt64)
	var sc storeClock
	for i := 0; i < 5; i++ {
		before := time.Now()
		rt, err := c.Time(context.Background()).Result()
		after := time.Now()
		if err != nil {
			t.Fatalf("redis TIME: %v", err)
		}
		if rtt := after.Sub(before); rtt < best {
			best = rtt
			sc.offset = rt.Sub(before.Add(rtt / 2))
		}
	}
	t.Logf("store clock: offset %v (TIME round trip %v)", sc.offset, best)
	return sc
}

// window is the store window holding local time t.
func (s storeClock) window(t time.Time) int64 {
	return t.Add(s.offset).UnixNano() / int64(rlqsWindow)
}

// start is the local time window w starts at.
func (s storeClock) start(w int64) time.Time {
	return time.Unix(0, w*int64(rlqsWindow)).Add(-s.offset)
}

// admissions counts admitted requests per store window, in all and per
// Envoy, and the token buckets the Envoys were assigned in each window.
type admissions struct {
	mu       sync.Mutex
	byWin    map[int64]int
	denied   map[int64]int
	perEnvoy map[int64]*[rlqsEnvoys]int
	assigned map[int64]*[rlqsEnvoys]int64
}

func newAdmissions() *admissions {
	return &admissions{byWin: map[int64]int{}, denied: map[int64]int{}, perEnvoy: map[int64]*[rlqsEnvoys]int{}, assigned: map[int64]*[rlqsEnvoys]int64{}}
}

func (a *admissions) add(w int64, envoy int, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok {
		a.denied[w]++
		return
	}
	a.byWin[w]++
	if a.perEnvoy[w] == nil {
		a.perEnvoy[w] = new([rlqsEnvoys]int)
	}
	a.perEnvoy[w][envoy]++
}

// assign records the max_tokens of the token buckets resp assigns.
func (a *admissions) assign(w int64, envoy int, resp *rlqsv3.RateLimitQuotaResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, act := range resp.GetBucketAction() {
		if tb := act.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket(); tb != nil {
			if a.assigned[w] == nil {
				a.assigned[w] = new([rlqsEnvoys]int64)
			}
			a.assigned[w][envoy] += int64(tb.GetMaxTokens())
		}
	}
}

// drive sends requests to f open loop at perWindow requests per window
// until stop: at each wake-up, as many as are due since start.
func drive(f *rlqsenvoy.Filter, envoy int, perWindow float64, sc storeClock, adm *admissions, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	bucket := map[string]string{"tenant": "acme"}
	rate := perWindow / rlqsWindow.Seconds()
	start := time.Now()
	sent := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			due := int(now.Sub(start).Seconds() * rate)
			for ; sent < due; sent++ {
				t := time.Now()
				ok := f.Decide(bucket)
				adm.add(sc.window(t), envoy, ok)
			}
		}
	}
}

// TestE2ERLQS: every window admits ≤ L through stream resets and a sidecar
// SIGKILL; steady windows under skew admit ≥ 90% of L; the Envoys' calls per
// admitted request are reported against a static split's admission.
func TestE2ERLQS(t *testing.T) {
	if testing.Short() {
		t.Skip("RLQS e2e runs 8 windows of 10 s")
	}
	r := testenv.StartRedis(t)
	sc := measureStoreClock(t, r)
	o := options{store: "redis", redisURL: r.URL(), args: rlqsServeArgs, files: map[string]string{"rlqs.yaml": rlqsPolicy()}}
	sidecars := []*sidecar{startSidecar(t, o), startSidecar(t, o)}

	adm := newAdmissions()
	denyAll := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	envoys := make([]*rlqsenvoy.Filter, rlqsEnvoys)
	for i := range envoys {
		own, other := sidecars[i/4], sidecars[1-i/4]
		f, err := rlqsenvoy.New(rlqsenvoy.Config{
			Domain:       rlqsDomain,
			Servers:      []string{own.grpcAddr, other.grpcAddr},
			NoAssignment: denyAll, // the configuration the bound needs (docs/rlqs.md)
			OnResponse: func(at time.Time, _ int, resp *rlqsv3.RateLimitQuotaResponse) {
				adm.assign(sc.window(at), i, resp)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		envoys[i] = f
	}

	// Demand starts now; the first measured window is the first to begin at
	// least rlqsWarm later (the windows before it are warm-up).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, f := range envoys {
		demand := rlqsCold
		if i == 0 {
			demand = rlqsHot // the hot one is on sidecar 0
		}
		wg.Add(1)
		go drive(f, i, demand, sc, adm, stop, &wg)
	}
	warmFrom := sc.window(time.Now())
	first := sc.window(time.Now().Add(rlqsWarm)) + 1
	// Faults, mid-window: stream resets in first+1 (one Envoy on each
	// sidecar, the hot one included), SIGKILL of sidecar 1 in first+3.
	resetWin, killWin := first+1, first+3
	events := map[int64]string{resetWin: "stream resets (Envoys 0 and 5)", killWin: "SIGKILL sidecar 1", killWin + 1: "after the kill (steady: its Envoys are on sidecar 0)"}
	waitUntil(sc.start(resetWin).Add(rlqsWindow / 2))
	envoys[0].ResetStream()
	envoys[5].ResetStream()
	waitUntil(sc.start(killWin).Add(rlqsWindow / 2))
	sidecars[1].kill()
	waitUntil(sc.start(first + rlqsWindows))
	close(stop)
	wg.Wait()

	var messages, endpointsOnZero int
	for i, f := range envoys {
		s := f.Stats()
		messages += s.Messages
		if survivor := i / 4; f.Endpoint() == survivor { // sidecar 0 is endpoint 0 of Envoys 0-3, 1 of 4-7
			endpointsOnZero++
		}
		t.Logf("envoy %d: allowed %d denied %d, messages %d (immediate %d), dropped %d, streams opened %d, failures %d", i, s.Allowed, s.Denied, s.Messages, s.ImmediateSent, s.Dropped, s.StreamOpens, s.StreamFailures)
	}
	if endpointsOnZero != rlqsEnvoys {
		t.Errorf("%d of %d Envoys on the surviving sidecar after the kill", endpointsOnZero, rlqsEnvoys)
	}

	adm.mu.Lock()
	defer adm.mu.Unlock()
	var admitted, steadyMin int
	steadyMin = math.MaxInt
	var table strings.Builder
	fmt.Fprintf(&table, "window  admitted  denied  of L    per Envoy admitted / assigned (0 is hot)  note\n")
	for w := warmFrom; w < first+rlqsWindows; w++ {
		n := adm.byWin[w]
		note := events[w]
		if w < first {
			note = "warm-up (subscriptions)"
		} else {
			admitted += n
		}
		var per []string
		for e := 0; e < rlqsEnvoys; e++ {
			var got int
			var asg int64
			if p := adm.perEnvoy[w]; p != nil {
				got = p[e]
			}
			if p := adm.assigned[w]; p != nil {
				asg = p[e]
			}
			per = append(per, fmt.Sprintf("%d/%d", got, asg))
		}
		fmt.Fprintf(&table, "%6d  %8d  %6d  %5.1f%%  %s  %s\n", w-first, n, adm.denied[w], 100*float64(n)/rlqsL, strings.Join(per, " "), note)
		if n > rlqsL {
			t.Errorf("window %d admitted %d > L = %d", w-first, n, rlqsL)
		}
		if w >= first && (note == "" || w == killWin+1) && n < steadyMin {
			steadyMin = n
		}
	}
	total := 0
	for w, n := range adm.byWin {
		total += n
		if (w < warmFrom || w >= first+rlqsWindows) && n > rlqsL {
			t.Errorf("window %d admitted %d > L", w-first, n)
		}
	}
	static := (7*math.Min(rlqsCold, rlqsL/8) + math.Min(rlqsHot, rlqsL/8)) / rlqsL
	t.Logf("per store window (L = %d per %v, demand 1.2 L: hot %.0f, cold %.0f each):\n%s", rlqsL, rlqsWindow, rlqsHot, rlqsCold, table.String())
	t.Logf("calls per admitted request: %d report messages / %d admitted = %.4f (RLS: 1 call per request); measured windows %.1f%% of L, steady ones ≥ %.1f%%, a static L/8 split %.1f%%",
		messages, total, float64(messages)/float64(total), 100*float64(admitted)/(rlqsWindows*rlqsL), 100*float64(steadyMin)/rlqsL, 100*static)
	if float64(steadyMin) < rlqsShare*rlqsL {
		t.Errorf("a steady window admitted %d < %.0f%% of L = %d", steadyMin, 100*rlqsShare, rlqsL)
	}
}

// waitUntil blocks until the local clock reads at (the scenario's own
// schedule, not a pause for something to settle).
func waitUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		<-time.After(d)
	}
}
