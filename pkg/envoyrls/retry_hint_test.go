package envoyrls_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// TestOverLimitDurationUntilResetIsTheRetryTime is issue 9 over gRPC: a
// sliding window of 5 per minute; the 6th call is OVER_LIMIT, and its
// duration_until_reset (and RateLimit-Reset) is when a retry fits: a retry
// then is OK, a microsecond earlier it is still OVER_LIMIT. It used to be the
// current window's end, 51.8 s away, when a retry is still OVER_LIMIT.
func TestOverLimitDurationUntilResetIsTheRetryTime(t *testing.T) {
	d, err := policy.Parse("hint.yaml", []byte(`
domain: hint
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}, Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	var now atomic.Int64 // the server's clock, in Unix ns
	at := func(t time.Time) { now.Store(t.UnixNano()) }
	c := serveGRPC(t, envoyrls.NewRateLimitServer(e, envoyrls.Options{Headers: true, Now: func() time.Time { return time.Unix(0, now.Load()).UTC() }}))
	call := func() (*rlsv3.RateLimitResponse, map[string]string) {
		t.Helper()
		resp, err := c.ShouldRateLimit(context.Background(), rlReq("hint", "user", "u"))
		if err != nil {
			t.Fatal(err)
		}
		headers := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			headers[h.Key] = h.Value
		}
		return resp, headers
	}

	first := time.Date(2027, 3, 1, 0, 0, 8, 200_000_000, time.UTC) // 51.8 s before the minute ends
	at(first)
	for i := 0; i < 5; i++ {
		if resp, _ := call(); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v", i+1, resp)
		}
	}
	resp, headers := call()
	hint := resp.Statuses[0].GetDurationUntilReset().AsDuration()
	// The 5 weigh 5·(60−x)/60 x seconds into the next minute: one more fits
	// from x = 12 s.
	if want := 51800*time.Millisecond + 12*time.Second; resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || hint != want || headers[envoyrls.HeaderReset] != "64" {
		t.Fatalf("6th call: %v, duration_until_reset %v (want %v), %s %q (want 64)", resp.OverallCode, hint, want, envoyrls.HeaderReset, headers[envoyrls.HeaderReset])
	}
	at(first.Add(hint - time.Microsecond))
	if resp, _ := call(); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a microsecond before the hint: %v", resp.OverallCode)
	}
	at(first.Add(hint))
	if resp, _ := call(); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("at the hint: %v, duration_until_reset %v", resp.OverallCode, resp.Statuses[0].GetDurationUntilReset().AsDuration())
	}
}
