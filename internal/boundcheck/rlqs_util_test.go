package boundcheck

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

var rlqsUtilization = flag.Bool("rlqs-utilization", false, "run TestRLQSUtilization, the RLQS utilization measurement docs/rlqs.md quotes")

// utilFleet is issue 41's utilization shape: two sidecars, eight Envoys
// (four on each: envoys nil) under DENY_ALL, Poisson arrivals of demand × L
// per window, one Envoy hot at five times each cold one (eight Envoys at
// 1.2 L: 0.5 L and 0.1 L), for windows windows of 10 s, all starting
// within a second; resets: every 3 s one Envoy's stream resets, in turn.
// envoys, when set, is another fleet: each Envoy's sidecar.
func utilFleet(seed uint64, limit int64, demand float64, windows int, resets bool, envoys []int) RLQSSchedule {
	rng := rand.New(rand.NewPCG(seed, 4141))
	if envoys == nil {
		envoys = []int{0, 0, 0, 0, 1, 1, 1, 1}
	}
	sc := RLQSSchedule{Seed: seed, Policy: RLQSPolicy{Limit: limit, Window: 10 * time.Second, Name: "l0"}, Servers: slices.Max(envoys) + 1,
		Envoys: envoys, Length: time.Duration(windows) * 10 * time.Second}
	cold := demand / float64(len(envoys)+4) * float64(limit) / sc.Policy.Window.Seconds()
	for e := range sc.Envoys {
		rate := cold
		if e == 0 {
			rate = 5 * cold
		}
		sc.Steps = append(sc.Steps, poissonRequests(rng, e, rate, time.Duration(rng.Int64N(int64(time.Second))), sc.Length)...)
	}
	if resets {
		for i, at := 0, 3*time.Second; at < sc.Length; i, at = i+1, at+3*time.Second {
			sc.Steps = append(sc.Steps, RLQSStep{At: at, Kind: RLQSReset, Envoy: i % len(sc.Envoys)})
		}
	}
	slices.SortStableFunc(sc.Steps, func(a, b RLQSStep) int { return cmp.Compare(a.At, b.At) })
	return sc
}

// TestRLQSUtilization measures issue 41's utilization shape on the
// checker's simulated clock (the memory store, Envoy's filter and timer,
// the real sidecars): per steady window (every window but the first), and
// in the first, what was admitted of min(L, demand), over five seeds of eight windows each,
// at L = 100 and 400 per 10 s, demand 1.2 L and 3 L, with and without a
// stream reset every 3 s. Every window is judged by the bounds table too.
// It asserts the bound and no figure: they are docs/rlqs.md's. A
// measurement of 40 runs, it runs when asked (-rlqs-utilization): beside a
// second make test under the race detector one of its runs once failed to
// settle (a response crossed after the clock moved: the checker's harness,
// see rlqs_settle.go), which TestRLQSBoundsHold's seeds have not shown.
func TestRLQSUtilization(t *testing.T) {
	if !*rlqsUtilization {
		t.Skip("a measurement for docs/rlqs.md: go test -run TestRLQSUtilization -v ./internal/boundcheck -args -rlqs-utilization")
	}
	type shape struct {
		name   string
		envoys []int
	}
	for _, limit := range []int64{100, 400} {
		for _, demand := range []float64{1.2, 3} {
			for _, resets := range []bool{false, true} {
				for _, fleet := range []shape{{"two sidecars, eight Envoys", nil}, {"one sidecar, four Envoys", []int{0, 0, 0, 0}}} {
					if fleet.envoys != nil && resets {
						continue
					}
					utilization(t, limit, demand, resets, fleet.name, fleet.envoys)
				}
			}
		}
	}
}

// utilization plays five seeds of utilFleet's shape and logs what was
// admitted of min(L, demand), per steady window and in the first.
func utilization(t *testing.T, limit int64, demand float64, resets bool, name string, envoys []int) {
	{
		{
			{
				var all, warm []float64
				for seed := uint64(1); seed <= 5; seed++ {
					sc := utilFleet(seed, limit, demand, 8, resets, envoys)
					told, err := PlayRLQS(context.Background(), sc, memstore.New(), fmt.Sprintf("bcu%d", limit))
					if err != nil {
						t.Fatal(err)
					}
					for _, v := range JudgeRLQS(sc, told) {
						t.Errorf("seed %d: %v", seed, v.Violation)
					}
					n := int(sc.Length / sc.Policy.Window)
					admitted, asked := make([]int64, n), make([]int64, n)
					for i, st := range sc.Steps {
						if st.Kind != RLQSRequest {
							continue
						}
						w := st.At / sc.Policy.Window
						asked[w]++
						if told.Steps[i].Admitted {
							admitted[w]++
						}
					}
					warm = append(warm, float64(admitted[0])/float64(min(limit, asked[0])))
					for w := 1; w < n; w++ {
						all = append(all, float64(admitted[w])/float64(min(limit, asked[w])))
					}
				}
				slices.Sort(all)
				var sum float64
				over := 0
				for _, u := range all {
					sum += u
					if u >= 0.9 {
						over++
					}
				}
				slices.Sort(warm)
				t.Logf("%s, L %d, demand %.1f L, resets %v: steady windows admitted of min(L, demand): min %.2f, 10th percentile %.2f, mean %.3f, %d of %d at 0.90 or more; the first window (the Envoys subscribing): %.2f–%.2f",
					name, limit, demand, resets, all[0], all[len(all)/10], sum/float64(len(all)), over, len(all), warm[0], warm[len(warm)-1])
			}
		}
	}
}
