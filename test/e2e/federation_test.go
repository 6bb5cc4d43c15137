package e2e

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// fedLimit is TestE2EFederation's limit per one-second window.
const fedLimit = 300

// fedPolicy is the policy file of a federated rule on tenant, limit units
// per one-second window, leased from the coordinator batch units at once.
func fedPolicy(limit, batch int) string {
	return fmt.Sprintf(`domain: fed
descriptors:
  - key: tenant
    mode: federated
    federation: {batch: %d}
    rate_limit: {unit: second, requests_per_unit: %d}
`, batch, limit)
}

// fedRequest is the one descriptor fedPolicy limits.
var fedRequest = &rlsv3.RateLimitRequest{Domain: "fed", Descriptors: []*commonv3.RateLimitDescriptor{
	{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}},
}}

// startFederation starts regions × perRegion real throttlekit processes
// with policy, each region's own redis-server as its escrow (L2) and
// coordURL as the coordinator (L3) within timeout (--federation-timeout):
// procs[r] are region r's processes.
func startFederation(t *testing.T, coordURL string, timeout time.Duration, regions, perRegion int, policy string) [][]*sidecar {
	t.Helper()
	procs := make([][]*sidecar, regions)
	for r := range regions {
		l2 := testenv.StartRedis(t)
		for range perRegion {
			procs[r] = append(procs[r], startSidecar(t, options{store: "redis", redisURL: l2.URL(),
				args:  []string{"--region", fmt.Sprintf("region-%d", r), "--federation-url", coordURL, "--federation-timeout", timeout.String()},
				files: map[string]string{"fed.yaml": policy}}))
		}
	}
	return procs
}

// fedTally counts a federated rule's answers per one-second window (named
// by its end, Unix s), two ways:
//
//   - named: the window the OK answer names. The admission was made between
//     the call's sending and its answer, and its window ends
//     duration_until_reset after that; an answer whose two readings round
//     to different windows is ambiguous.
//   - on the clock every server and process here shares (one machine): the
//     window the call was sent in (sent), and the one it was sent and
//     answered in (wall), the admission between the two. An answer to a
//     call that crossed a boundary (straddled) is in no wall window: the
//     bound is checked on the admissions certain to lie in a window, so a
//     count above the limit is over-admission whatever the straddling
//     answers were.
//
// The named view misses a grant that outlives its window: units served
// after the window's end name the window that granted them, and that
// window's count stays within the limit. The wall view catches them.
//
// A fedTally is safe for concurrent use.
type fedTally struct {
	mu          sync.Mutex
	calls, errs int
	firstErr    error
	oks         int           // OK answers
	named       map[int64]int // OK answers by the window they name
	ambiguous   int           // OK answers naming no single window
	wall        map[int64]int // OK answers by the window the call lay in
	straddled   int           // OK answers to calls that crossed a boundary
	// OK and OVER_LIMIT answers by the window the call was sent in.
	sentOK, sentDenied map[int64]int
}

func newFedTally() *fedTally {
	return &fedTally{named: map[int64]int{}, wall: map[int64]int{}, sentOK: map[int64]int{}, sentDenied: map[int64]int{}}
}

// call asks p, counts the answer and returns its code (UNKNOWN for a call
// that failed).
func (f *fedTally) call(p *sidecar) rlsv3.RateLimitResponse_Code {
	sent := time.Now()
	resp, err := p.call(fedRequest)
	got := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if err != nil {
		if f.errs++; f.firstErr == nil {
			f.firstErr = fmt.Errorf("%s, sent at %s: %w", p.grpcAddr, sent.Format(time.TimeOnly+".000"), err)
		}
		return rlsv3.RateLimitResponse_UNKNOWN
	}
	// Truncate drops the monotonic reading: every comparison below is on
	// the wall clock, the one the servers' windows are on.
	we := sent.Truncate(time.Second).Add(time.Second)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		f.sentDenied[we.Unix()]++
		return resp.OverallCode
	}
	f.oks++
	f.sentOK[we.Unix()]++
	if got.Before(we) {
		f.wall[we.Unix()]++
	} else {
		f.straddled++
	}
	until := resp.Statuses[0].GetDurationUntilReset().AsDuration()
	lo, hi := sent.Add(until), got.Add(until)
	named := lo.Add(500 * time.Millisecond).Truncate(time.Second)
	if hi.Add(500*time.Millisecond).Truncate(time.Second) != named {
		f.ambiguous++
	}
	f.named[named.Unix()]++
	return resp.OverallCode
}

// checkNamed fails t for every window named by more OK answers than
// limit. It holds a process to the window it reports; it is blind to
// units served past their window's end (see fedTally), and it is exact only
// when a lease's round trip is short: a process reckons a window's end on
// its own clock from when it sent the lease, so a slow round trip makes
// answers name a window early.
func (f *fedTally) checkNamed(t *testing.T, limit int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range sortedWindows(f.named) {
		if n := f.named[w]; n > limit {
			t.Errorf("window ending %s: %d OK answers name it > the limit %d", windowName(w), n, limit)
		}
	}
}

// checkWall fails t for every window on the clock with more OK answers,
// to calls sent and answered in it, than limit.
func (f *fedTally) checkWall(t *testing.T, limit int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range sortedWindows(f.wall) {
		if n := f.wall[w]; n > limit {
			t.Errorf("window ending %s: %d OK answers to calls sent and answered in it > the limit %d", windowName(w), n, limit)
		}
	}
}

// String is the tally for a log line.
func (f *fedTally) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := fmt.Sprint(f.errs)
	if f.firstErr != nil {
		errs += fmt.Sprintf(" (the first: %v)", f.firstErr)
	}
	return fmt.Sprintf("%d calls, %s errors, %d OK (%d ambiguous by the window named, %d straddling a boundary); OK per window named %v; per window sent and answered in %v; per window sent in %v OK, %v denied",
		f.calls, errs, f.oks, f.ambiguous, f.straddled, f.named, f.wall, f.sentOK, f.sentDenied)
}

func sortedWindows(m map[int64]int) []int64 {
	ws := make([]int64, 0, len(m))
	for w := range m {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	return ws
}

func windowName(unix int64) string { return time.Unix(unix, 0).Format(time.TimeOnly) }

// TestE2EFederation: three regions of two real throttlekit processes each,
// each region's own Redis as its escrow (L2), one more Redis as the
// coordinator (L3). Load far above the limit for several windows: the OK
// answers of all six processes in any window are at most the limit, and at
// least 95% of it in every full window.
func TestE2EFederation(t *testing.T) {
	l3 := testenv.StartRedis(t)
	var procs []*sidecar
	for _, region := range startFederation(t, l3.URL(), time.Second, 3, 2, fedPolicy(fedLimit, 20)) {
		procs = append(procs, region...)
	}
	// Start on a window boundary plus a little, run 5 windows: the first
	// and the last may be partial (the load starts and stops in them).
	start := time.Now().Truncate(time.Second).Add(2 * time.Second)
	end := start.Add(5 * time.Second)
	for time.Now().Before(start) {
		// Waits for the boundary by polling the clock with real calls: the
		// load below begins at it.
		procs[0].call(fedRequest) //nolint:errcheck // warm-up: the answers are not counted
	}
	tally := newFedTally()
	var wg sync.WaitGroup
	for _, p := range procs {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					tally.call(p)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("6 processes in 3 regions: %v", tally)
	if tally.errs > 0 || tally.ambiguous > 0 {
		t.Fatalf("%d calls failed and %d answers named no single window", tally.errs, tally.ambiguous)
	}
	tally.checkNamed(t, fedLimit)
	tally.checkWall(t, fedLimit)
	for w := start.Add(2 * time.Second); w.Before(end); w = w.Add(time.Second) {
		if n := tally.named[w.Unix()]; n < fedLimit*95/100 {
			t.Errorf("full window ending %s: %d OK answers < 95%% of the limit %d", w.Format(time.TimeOnly), n, fedLimit)
		}
	}
	// Every process reports its region's federation series.
	m := procs[0].metrics(t)
	if got := m.get("throttlekit_federation_leased_units_total", "domain", "fed"); got <= 0 {
		t.Errorf("throttlekit_federation_leased_units_total{domain=fed} = %v, want > 0", got)
	}
}
