package rlqsserver

import (
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// BenchmarkDecodeReports: one Envoy's 5 s report of 16 buckets of two
// entries, checked and keyed (the per-report path before the drivers).
func BenchmarkDecodeReports(b *testing.B) {
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "api"}
	for i := range 16 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, bucketUsage(map[string]string{"tenant": string(rune('a' + i)), "path": "/v1/items"}, 40, 3, durationpb.New(5*time.Second)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, out, _, err := decodeReports(m); err != nil || len(out) != 16 {
			b.Fatal(err)
		}
	}
}
