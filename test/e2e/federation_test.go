package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// fedLimit is the federated rule's limit per one-second window.
const fedLimit = 300

const fedPolicy = `domain: fed
descriptors:
  - key: tenant
    mode: federated
    federation: {batch: 20}
    rate_limit: {unit: second, requests_per_unit: 300}
`

// TestE2EFederation: three regions of two real throttlekit processes each,
// each region's own Redis as its escrow (L2), one more Redis as the
// coordinator (L3). Load far above the limit for several windows: the OK
// answers of all six processes in any window are at most the limit, and at
// least 95% of it in every full window.
func TestE2EFederation(t *testing.T) {
	l3 := testenv.StartRedis(t)
	var procs []*sidecar
	for r := range 3 {
		l2 := testenv.StartRedis(t)
		for range 2 {
			procs = append(procs, startSidecar(t, options{store: "redis", redisURL: l2.URL(),
				args:  []string{"--region", fmt.Sprintf("region-%d", r), "--federation-url", l3.URL(), "--federation-timeout", "1s"},
				files: map[string]string{"fed.yaml": fedPolicy}}))
		}
	}
	req := &rlsv3.RateLimitRequest{Domain: "fed", Descriptors: []*commonv3.RateLimitDescriptor{
		{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}},
	}}
	// Start on a window boundary plus a little, run 5 windows: the first
	// and the last may be partial (the load starts and stops in them).
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	end := start.Add(5 * time.Second)
	for time.Now().Before(start) {
		// Waits for the boundary by polling the clock with real calls: the
		// load below begins at it.
		procs[0].call(req) //nolint:errcheck // warm-up: the answers are not counted
	}
	var mu sync.Mutex
	oks := map[int64]int{} // window end (Unix s) → OK answers
	var calls, errs, ambiguous int
	var wg sync.WaitGroup
	for _, p := range procs {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					sent := time.Now()
					resp, err := p.call(req)
					got := time.Now()
					mu.Lock()
					calls++
					if err != nil {
						errs++
						mu.Unlock()
						continue
					}
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						// The answer names its window: the admission was
						// made between sent and got, and its window ends
						// duration_until_reset after that.
						until := resp.Statuses[0].GetDurationUntilReset().AsDuration()
						lo, hi := sent.Add(until), got.Add(until)
						we := lo.Add(500 * time.Millisecond).Truncate(time.Second)
						if hi.Add(500*time.Millisecond).Truncate(time.Second) != we {
							ambiguous++
						}
						oks[we.Unix()]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%d calls by 6 processes in 3 regions, %d errors, %d OK answers whose window was ambiguous; OK per window: %v", calls, errs, ambiguous, oks)
	if errs > 0 || ambiguous > 0 {
		t.Fatalf("%d calls failed and %d answers named no single window", errs, ambiguous)
	}
	for w := start.Add(time.Second); !w.After(end); w = w.Add(time.Second) {
		n := oks[w.Unix()]
		full := w.After(start.Add(time.Second)) && w.Before(end)
		switch {
		case n > fedLimit:
			t.Errorf("window ending %s: %d OK answers > the limit %d", w.Format(time.TimeOnly), n, fedLimit)
		case full && n < fedLimit*95/100:
			t.Errorf("full window ending %s: %d OK answers < 95%% of the limit %d", w.Format(time.TimeOnly), n, fedLimit)
		}
	}
	for w, n := range oks {
		if n > fedLimit {
			t.Errorf("window ending %d: %d OK answers > the limit %d", w, n, fedLimit)
		}
	}
	// Every process reports its region's federation series.
	m := procs[0].metrics(t)
	if got := m.get("throttlekit_federation_leased_units_total", "domain", "fed"); got <= 0 {
		t.Errorf("throttlekit_federation_leased_units_total{domain=fed} = %v, want > 0", got)
	}
}
