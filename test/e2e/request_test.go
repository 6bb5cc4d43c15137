package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// request builds a RateLimitRequest.
func request(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// addend sets the request-level hits_addend.
func addend(n uint32, r *rlsv3.RateLimitRequest) *rlsv3.RateLimitRequest {
	r.HitsAddend = n
	return r
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets the descriptor-level hits_addend.
func hits(n uint64, d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// unique is a descriptor value no other subtest uses: the test's name and a
// suffix.
func unique(t *testing.T, suffix string) string {
	return strings.ReplaceAll(t.Name(), "/", ".") + "." + suffix
}

// statusLine renders a descriptor status as the step tables write it:
//
//	OK [account_daily 5/DAY] remaining=4
//	OVER_LIMIT [2/DAY] remaining=0      (an unnamed limit)
//	OK [] remaining=0                   (no limit applied)
func statusLine(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	limit := ""
	if l := st.GetCurrentLimit(); l != nil {
		limit = fmt.Sprintf("%d/%v", l.GetRequestsPerUnit(), l.GetUnit())
		if l.GetName() != "" {
			limit = l.GetName() + " " + limit
		}
	}
	return fmt.Sprintf("%v [%s] remaining=%d", st.GetCode(), limit, st.GetLimitRemaining())
}

// step is one call of a scenario and the answer it must get.
type step struct {
	what     string // what the call shows
	req      *rlsv3.RateLimitRequest
	overall  rlsv3.RateLimitResponse_Code
	statuses []string // statusLine of each descriptor, in order
}

// runSteps makes the calls in order and checks each answer. It returns the
// responses.
func runSteps(t *testing.T, s *sidecar, steps []step) []*rlsv3.RateLimitResponse {
	t.Helper()
	out := make([]*rlsv3.RateLimitResponse, len(steps))
	for i, st := range steps {
		resp := s.should(t, st.req)
		out[i] = resp
		got := make([]string, len(resp.GetStatuses()))
		for j, ds := range resp.GetStatuses() {
			got[j] = statusLine(ds)
		}
		if resp.GetOverallCode() != st.overall || strings.Join(got, "\n") != strings.Join(st.statuses, "\n") {
			t.Errorf("step %d (%s):\n got overall %v, statuses\n\t%s\nwant overall %v, statuses\n\t%s",
				i+1, st.what, resp.GetOverallCode(), strings.Join(got, "\n\t"), st.overall, strings.Join(st.statuses, "\n\t"))
		}
	}
	return out
}

// windowEnd is the end of the window of length period holding t, windows
// being aligned on the Unix epoch.
func windowEnd(t time.Time, period time.Duration) time.Time {
	n := t.UnixNano()
	return time.Unix(0, (n/int64(period)+1)*int64(period))
}

// checkUntilReset fails t unless got is the time from a moment between
// before and after to the end of that moment's window of length period.
func checkUntilReset(t *testing.T, what string, got time.Duration, period time.Duration, before, after time.Time) {
	t.Helper()
	// The sidecar and Redis read the same clock as the test; allow for the
	// rounding of a store that keeps microseconds.
	const slack = 2 * time.Millisecond
	lo, hi := windowEnd(after, period).Sub(after)-slack, windowEnd(before, period).Sub(before)+slack
	if windowEnd(before, period) != windowEnd(after, period) {
		lo = 0 // a window ended during the call
	}
	if got < lo || got > hi {
		t.Errorf("%s: duration_until_reset %v, want between %v and %v (the rest of the current %v window)", what, got, lo, hi, period)
	}
}
