package envoyrls_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/metadata"

	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// BenchmarkShouldRateLimit is one ShouldRateLimit through the adapter and
// the engine (strict, in-memory store; no network), with the caller's trace
// context in the metadata: untraced (the default), traced and recorded
// (spans built, then dropped: no exporter, so the figure is the span's own
// cost), and traced with the caller's sampled flag off.
func BenchmarkShouldRateLimit(b *testing.B) {
	recording := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	b.Cleanup(func() { _ = recording.Shutdown(context.Background()) })
	for _, c := range []struct {
		name        string
		traced      bool
		traceparent string
	}{
		{"untraced", false, traceparent},
		{"traced", true, traceparent},
		{"traced-unsampled", true, "00-" + traceID + "-" + parentSpan + "-00"},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := envoyrls.Options{}
			if c.traced {
				opts.Tracer = recording.Tracer("bench")
			}
			s := envoyrls.NewRateLimitServer(newEngine(b, memstore.New()), opts)
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", c.traceparent))
			req := rlReq("edge", "wide", "bench") // 300 a second per value: most are over the limit
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
