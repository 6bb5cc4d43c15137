package rlqsserver

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

func bucketUsage(id map[string]string, allowed, denied uint64, elapsed *durationpb.Duration) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{NumRequestsAllowed: allowed, NumRequestsDenied: denied, TimeElapsed: elapsed}
	if id != nil {
		u.BucketId = &rlqspb.BucketId{Bucket: id}
	}
	return u
}

// TestDecodeReports: a message that cannot be served is an error; a usage
// that cannot be is skipped with its reason, the others served.
func TestDecodeReports(t *testing.T) {
	for name, m := range map[string]*rlqspb.RateLimitQuotaUsageReports{
		"nil":         nil,
		"no domain":   {BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{bucketUsage(map[string]string{"a": "b"}, 1, 0, nil)}},
		"long domain": {Domain: strings.Repeat("d", ratelimit.MaxDomainBytes+1)},
	} {
		if _, _, _, err := decodeReports(m); !errors.Is(err, ErrBadReport) {
			t.Errorf("%s: %v, want ErrBadReport", name, err)
		}
	}
	tooMany := map[string]string{}
	for i := range ratelimit.MaxEntries + 1 {
		tooMany[strings.Repeat("k", i+1)] = "v"
	}
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		bucketUsage(nil, 1, 0, nil),
		bucketUsage(map[string]string{}, 1, 0, nil),
		bucketUsage(tooMany, 1, 0, nil),
		bucketUsage(map[string]string{"": "v"}, 1, 0, nil),
		bucketUsage(map[string]string{"a": "b"}, 1, 0, &durationpb.Duration{Seconds: -5}),
		bucketUsage(map[string]string{"a": "b"}, 1, 0, durationpb.New(48*time.Hour)),
		bucketUsage(map[string]string{"a": "b"}, 1<<62, 1<<62, nil),
		bucketUsage(map[string]string{"b": "c", "a": "b"}, 3, 2, durationpb.New(5*time.Second)),
	}}
	domain, out, skips, err := decodeReports(m)
	if err != nil || domain != "d" {
		t.Fatal(domain, err)
	}
	var reasons []string
	for _, s := range skips {
		reasons = append(reasons, s.reason)
	}
	if got := strings.Join(reasons, ","); got != "bucket_id,bucket_id,entries,entries,elapsed,elapsed,counts" {
		t.Errorf("skips %s", got)
	}
	if len(out) != 1 || out[0].allowed != 3 || out[0].denied != 2 || out[0].elapsed != 5*time.Second || string(out[0].key) != "1:d1:a1:b1:b1:c" {
		t.Errorf("served %+v", out)
	}
}

// TestBucketKeyInjective: entries that concatenate alike are told apart.
func TestBucketKeyInjective(t *testing.T) {
	a := bucketKey("d", map[string]string{"ab": "c"})
	b := bucketKey("d", map[string]string{"a": "bc"})
	c := bucketKey("da", map[string]string{"b": "c"})
	if a == b || b == c || a == c {
		t.Errorf("keys collide: %q %q %q", a, b, c)
	}
}

// FuzzDecodeReports: any bytes Envoy could send decode to an error or to
// usages within every bound, never a panic; a stream's decoder, reused
// after another message, decodes them as a fresh one does.
func FuzzDecodeReports(f *testing.F) {
	seed, _ := proto.Marshal(&rlqspb.RateLimitQuotaUsageReports{Domain: "d", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		bucketUsage(map[string]string{"a": "b"}, 3, 2, durationpb.New(5*time.Second)),
		bucketUsage(nil, 1, 0, nil),
	}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &rlqspb.RateLimitQuotaUsageReports{}
		if proto.Unmarshal(b, m) != nil {
			return
		}
		domain, out, skips, err := decodeReports(m)
		var d decoder
		d.decode(&rlqspb.RateLimitQuotaUsageReports{Domain: "other", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			bucketUsage(map[string]string{"z": strings.Repeat("y", 300), "a": "b"}, 1, 0, nil), bucketUsage(nil, 1, 0, nil),
		}})
		rdomain, rout, rskips, rerr := d.decode(m)
		if (err == nil) != (rerr == nil) || rdomain != domain || len(rout) != len(out) || len(rskips) != len(skips) {
			t.Fatalf("a reused decoder: %q %d usages %d skips %v; a fresh one: %q %d %d %v", rdomain, len(rout), len(rskips), rerr, domain, len(out), len(skips), err)
		}
		for i := range out {
			if string(rout[i].key) != string(out[i].key) {
				t.Fatalf("usage %d: a reused decoder keys %q, a fresh one %q", i, rout[i].key, out[i].key)
			}
		}
		if err != nil {
			return
		}
		if domain == "" || len(domain) > ratelimit.MaxDomainBytes {
			t.Fatalf("domain %q accepted", domain)
		}
		for _, u := range out {
			if len(u.id) == 0 || checkEntries(u.id) != nil || u.elapsed < 0 || u.elapsed > MaxElapsed || u.allowed+u.denied > 1<<40 {
				t.Fatalf("usage out of bounds accepted: %+v", u)
			}
			if string(u.key) != bucketKey(domain, u.id) {
				t.Fatalf("key %q is not the bucket's", u.key)
			}
		}
	})
}

// TestAFullReportIsServed (issue 41, item 8): Envoy reports every bucket
// it caches at each tick, so an Envoy that has seen 5,000 buckets sends
// 5,000 usages; refused past 4,096, the whole report was, at every tick.
// Up to MaxUsagesPerReport are served; past it the rest are skipped as one
// skip that says how many.
func TestAFullReportIsServed(t *testing.T) {
	report := func(n int) *rlqspb.RateLimitQuotaUsageReports {
		m := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
		for i := range n {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, bucketUsage(map[string]string{"path": strconv.Itoa(i)}, 1, 0, nil))
		}
		return m
	}
	for _, tc := range []struct{ n, served, skipped int }{
		{5000, 5000, 0},
		{MaxUsagesPerReport, MaxUsagesPerReport, 0},
		{MaxUsagesPerReport + 7, MaxUsagesPerReport, 7},
	} {
		_, out, skips, err := decodeReports(report(tc.n))
		if err != nil {
			t.Fatalf("%d usages: %v, want them served", tc.n, err)
		}
		skipped := 0
		for _, s := range skips {
			if s.reason != "report" {
				t.Fatalf("%d usages: skip %v", tc.n, s.err)
			}
			skipped += s.n
		}
		if len(out) != tc.served || skipped != tc.skipped {
			t.Errorf("%d usages: served %d, skipped %d; want %d and %d", tc.n, len(out), skipped, tc.served, tc.skipped)
		}
	}
}
