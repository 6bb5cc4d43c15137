package boundcheck

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// utilFleet is issue 41's utilization shape: two sidecars, eight Envoys
// (four on each) under DENY_ALL, Poisson arrivals of 1.2 L per window, one
// Envoy hot at five times each cold one (0.5 L and 0.1 L), for windows
// windows of 10 s, all starting at once; resets: every 3 s one Envoy's
// stream resets, in turn.
func utilFleet(seed uint64, limit int64, windows int, resets bool) RLQSSchedule {
	rng := rand.New(rand.NewPCG(seed, 4141))
	sc := RLQSSchedule{Seed: seed, Policy: RLQSPolicy{Limit: limit, Window: 10 * time.Second, Name: "l0"}, Servers: 2,
		Envoys: []int{0, 0, 0, 0, 1, 1, 1, 1}, Length: time.Duration(windows) * 10 * time.Second}
	cold := 0.1 * float64(limit) / sc.Policy.Window.Seconds()
	for e := range sc.Envoys {
		rate := cold
		if e == 0 {
			rate = 5 * cold
		}
		for at := time.Duration(rng.Int64N(int64(time.Second))); at < sc.Length; at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) {
			sc.Steps = append(sc.Steps, RLQSStep{At: at, Kind: RLQSRequest, Envoy: e})
		}
	}
	if resets {
		for i, at := 0, 3*time.Second; at < sc.Length; i, at = i+1, at+3*time.Second {
			sc.Steps = append(sc.Steps, RLQSStep{At: at, Kind: RLQSReset, Envoy: i % len(sc.Envoys)})
		}
	}
	slices.SortStableFunc(sc.Steps, func(a, b RLQSStep) int { return cmp.Compare(a.At, b.At) })
	return sc
}

func TestRLQSUtilization(t *testing.T) {
	for _, limit := range []int64{100, 400} {
		for _, resets := range []bool{false, true} {
			sc := utilFleet(1, limit, 8, resets)
			told, err := PlayRLQS(context.Background(), sc, memstore.New(), fmt.Sprintf("bcu%d", limit))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range JudgeRLQS(sc, told) {
				t.Errorf("%v", v.Violation)
			}
			n := int(sc.Length / sc.Policy.Window)
			admitted, demand, assigned := make([]int64, n), make([]int64, n), make([]int64, n)
			for i, st := range sc.Steps {
				if st.Kind != RLQSRequest {
					continue
				}
				w := st.At / sc.Policy.Window
				demand[w]++
				if told.Steps[i].Admitted {
					admitted[w]++
				}
			}
			for _, a := range told.Actions {
				if a.Other == "" && a.At < sc.Length {
					assigned[a.At/sc.Policy.Window] += a.Tokens
				}
			}
			var util []string
			for w := range n {
				util = append(util, fmt.Sprintf("%.2f", float64(admitted[w])/float64(min(limit, demand[w]))))
			}
			t.Logf("L %d resets %v: admitted %v assigned %v demand %v; of min(L, demand) %v", limit, resets, admitted, assigned, demand, util)
		}
	}
}
