package engine_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// hintPolicy has one descriptor per algorithm, one in quota mode and one
// with two limits; %MODE% is replaced by the mode under test.
const hintPolicy = `
domain: hint
descriptors:
  - key: fixed
    %MODE%
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: sliding
    %MODE%
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
  - key: gcra
    %MODE%
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 4}
  - key: bucket
    %MODE%
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 4}
  - key: quota
    quota_mode: true
    %MODE%
    rate_limit: {unit: second, requests_per_unit: 3, unit_multiplier: 10, algorithm: sliding_window}
  - key: both
    %MODE%
    rate_limits:
      - {name: short, unit: second, requests_per_unit: 4, algorithm: gcra}
      - {name: long, unit: minute, requests_per_unit: 6, algorithm: sliding_window}
`

// hintKeys are hintPolicy's descriptors and the most their limits admit at
// once.
var hintKeys = []struct {
	key      string
	capacity uint32
}{{"fixed", 5}, {"sliding", 5}, {"gcra", 4}, {"bucket", 4}, {"quota", 3}, {"both", 6}}

// TestOverLimitStatusCarriesTheRetryTime: one client, no other traffic,
// every algorithm and mode. An OVER_LIMIT status's UntilReset is when the
// same request fits: retried then it is OK, a microsecond earlier it is
// still OVER_LIMIT. No status reports more remaining than its limit admits
// at once.
func TestOverLimitStatusCarriesTheRetryTime(t *testing.T) {
	for _, mode := range []string{"mode: strict", "mode: cached_deny", "mode: leased\n    lease: {batch: 2}"} {
		name, _, _ := strings.Cut(strings.TrimPrefix(mode, "mode: "), "\n")
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, memstore.New(), map[string]string{"hint.yaml": strings.ReplaceAll(hintPolicy, "%MODE%", mode)})
			rng := rand.New(rand.NewPCG(21, uint64(len(name))))
			for _, k := range hintKeys {
				key, capacity := k.key, k.capacity
				now := t0.Add(37 * time.Second)
				ask := func(cost uint32, at time.Time) engine.Status {
					t.Helper()
					r := req("hint", key+"=v")
					r.HitsAddend = cost
					st := decide(t, e, r, at).Statuses[0]
					if st.Remaining > capacity {
						t.Fatalf("%s: cost %d at %v: remaining %d > %d", key, cost, at.Sub(t0), st.Remaining, capacity)
					}
					return st
				}
				for i := 0; i < 200; i++ {
					now = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
					cost := 1 + rng.Uint32N(2)
					st := ask(cost, now)
					if st.Code == engine.CodeOK {
						continue
					}
					if st.UntilReset <= 0 {
						t.Fatalf("%s: cost %d OVER_LIMIT at %v with duration_until_reset %v", key, cost, now.Sub(t0), st.UntilReset)
					}
					retry := now.Add(st.UntilReset)
					if st.UntilReset > time.Microsecond && ask(cost, retry.Add(-time.Microsecond)).Code != engine.CodeOverLimit {
						t.Fatalf("%s: cost %d OVER_LIMIT at %v with duration_until_reset %v, OK a microsecond earlier", key, cost, now.Sub(t0), st.UntilReset)
					}
					if again := ask(cost, retry); again.Code != engine.CodeOK {
						t.Fatalf("%s: cost %d OVER_LIMIT at %v with duration_until_reset %v, OVER_LIMIT again then (%v more)", key, cost, now.Sub(t0), st.UntilReset, again.UntilReset)
					}
					now = retry
				}
			}
		})
	}
}

// TestSlidingWindowRetryHint is issue 9's report: sliding_window, 5 per
// minute; the 6th call is OVER_LIMIT and must say when a retry fits, not
// when the current window ends. An OK status's reset is when all 5 are
// back: the end of the next window.
func TestSlidingWindowRetryHint(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"hint.yaml": strings.ReplaceAll(hintPolicy, "%MODE%", "")})
	now := t0.Add(8200 * time.Millisecond) // 51.8 s before the window ends
	var fifth engine.Status
	for i := 0; i < 5; i++ {
		if fifth = decide(t, e, req("hint", "sliding=v"), now).Statuses[0]; fifth.Code != engine.CodeOK {
			t.Fatalf("call %d: %+v", i+1, fifth)
		}
	}
	st := decide(t, e, req("hint", "sliding=v"), now).Statuses[0]
	// The 5 weigh 5·(60−x)/60 x seconds into the next window: 4 or fewer,
	// so one more fits, from x = 12 s.
	if want := 51800*time.Millisecond + 12*time.Second; st.Code != engine.CodeOverLimit || st.UntilReset != want {
		t.Fatalf("6th call: %v in %v, want OVER_LIMIT in %v", st.Code, st.UntilReset, want)
	}
	if got := decide(t, e, req("hint", "sliding=v"), now.Add(st.UntilReset)); got.Code != engine.CodeOK {
		t.Fatalf("retry after %v: %s", st.UntilReset, codes(got))
	}
	if want := 51800*time.Millisecond + time.Minute; fifth.UntilReset != want {
		t.Fatalf("5th call: reset in %v, want %v (all 5 are back when the next window ends)", fifth.UntilReset, want)
	}
}

// TestBlockedResetIsTheWindowEnd: a rule of requests_per_unit 0, and a
// request's override limit of 0, report the end of the unit's window on
// Unix time — the window every counted limit of that unit uses — for every
// unit, including week, month and year, which are not aligned on Go's zero
// time.
func TestBlockedResetIsTheWindowEnd(t *testing.T) {
	var src strings.Builder
	src.WriteString("domain: blocked\ndescriptors:\n")
	for _, u := range policy.Units {
		fmt.Fprintf(&src, "  - key: %s\n    rate_limit: {unit: %s, requests_per_unit: 0}\n", u, u)
	}
	src.WriteString("  - key: seven\n    rate_limit: {unit: second, unit_multiplier: 7, requests_per_unit: 0}\n")
	e := newEngine(t, memstore.New(), map[string]string{"blocked.yaml": src.String()})
	now := time.Date(2027, 3, 3, 13, 14, 15, 16000, time.UTC) // a Wednesday
	windowEnd := func(p time.Duration) time.Duration {
		us, pus := now.UnixMicro(), p.Microseconds()
		return time.UnixMicro((us/pus + 1) * pus).Sub(now)
	}
	for _, u := range policy.Units {
		t.Run(string(u), func(t *testing.T) {
			want := windowEnd(u.Duration())
			if st := decide(t, e, req("blocked", string(u)+"=x"), now).Statuses[0]; st.Code != engine.CodeOverLimit || st.UntilReset != want {
				t.Fatalf("blocked rule: %v in %v, want OVER_LIMIT in %v", st.Code, st.UntilReset, want)
			}
			r := req("blocked", "override="+string(u))
			r.Descriptors[0].Override = &engine.Override{RequestsPerUnit: 0, Unit: u}
			if st := decide(t, e, r, now).Statuses[0]; st.Code != engine.CodeOverLimit || st.UntilReset != want {
				t.Fatalf("override of 0: %v in %v, want OVER_LIMIT in %v", st.Code, st.UntilReset, want)
			}
		})
	}
	if st, want := decide(t, e, req("blocked", "seven=x"), now).Statuses[0], windowEnd(7*time.Second); st.UntilReset != want {
		t.Fatalf("7 s unit: reset in %v, want %v", st.UntilReset, want)
	}
}

// TestRefundKeepsRemainingWithinCapacity: a limit whose units are refunded
// (another descriptor of the request is over) reports at most what it
// admits at once. Leased GCRA with a burst of 20 (batch 10, low water 2):
// once a refill lands on a store that has refilled meanwhile, the node
// counts 21 remaining after serving; refunded, 22.
func TestRefundKeepsRemainingWithinCapacity(t *testing.T) {
	e := newEngine(t, memstore.New(), map[string]string{"r.yaml": `
domain: r
descriptors:
  - key: user
    mode: leased
    lease: {batch: 10, low_water: 2}
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 20}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
`})
	settled := func() bool {
		for _, s := range e.Snapshot() {
			if s.Limiter.LeasesGranted != s.Limiter.LeasesRequested {
				return false
			}
		}
		return true
	}
	at := func(n int, now time.Time) {
		for i := 0; i < n; i++ {
			if got := decide(t, e, req("r", "user=u"), now); got.Code != engine.CodeOK || got.Statuses[0].Remaining > 20 {
				t.Fatalf("%v: %s, remaining %d", now.Sub(t0), codes(got), got.Statuses[0].Remaining)
			}
			if !testenv.Eventually(settled) {
				t.Fatalf("a lease never landed: %+v", e.Snapshot())
			}
		}
	}
	at(7, t0)                  // a lease of 10; 3 credits left
	at(1, t0.Add(time.Second)) // 2 left: a refill of 8 lands on a full store
	got := decide(t, e, req("r", "user=u", "banned=x"), t0.Add(time.Second))
	if got.Code != engine.CodeOverLimit || got.Statuses[0].Code != engine.CodeOK || got.Statuses[0].Remaining > 20 {
		t.Fatalf("refunded: %s, remaining %d > burst 20", codes(got), got.Statuses[0].Remaining)
	}
}
