package rlqsserver

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// BenchmarkDecodeReports: one Envoy's 5 s report of 16 buckets of two
// entries, checked and keyed (the per-report path before the drivers),
// with the stream's decoder reused from one report to the next as handle
// does.
func BenchmarkDecodeReports(b *testing.B) {
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "api"}
	for i := range 16 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, bucketUsage(map[string]string{"tenant": string(rune('a' + i)), "path": "/v1/items"}, 40, 0, durationpb.New(5*time.Second)))
	}
	var d decoder
	b.ReportAllocs()
	for b.Loop() {
		if _, out, _, err := d.decode(m); err != nil || len(out) != 16 {
			b.Fatal(err)
		}
	}
}

// BenchmarkReport: one Envoy's steady-state 5 s report of 16 subscribed
// buckets of a windowed limit, through decoding, resolution against the
// engine's policy and each bucket's machine (no store call: the window's
// assignments are out).
func BenchmarkReport(b *testing.B) {
	eng, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	d, err := policy.Parse("api.yaml", []byte("domain: api\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 1000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	if err := eng.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
		b.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2027, 3, 1, 0, 0, 10, 0, time.UTC))
	s, err := New(Options{Resolver: eng, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	str := newStream(1, 1, s.stats)
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "api"}
	for i := range 16 {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, bucketUsage(map[string]string{"tenant": string(rune('a' + i)), "path": "/v1/items"}, 40, 0, durationpb.New(5*time.Second)))
	}
	if err := s.handle(str, m); err != nil { // subscribes: leases in the background
		b.Fatal(err)
	}
	s.calls.Wait()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.handle(str, m); err != nil {
			b.Fatal(err)
		}
	}
}
