package engine_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

const benchPolicy = `
domain: edge
descriptors:
  - key: remote_address
    mode: %MODE%
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

func benchEngine(b *testing.B, mode string, opts engine.Options) *engine.Engine {
	src := benchPolicy
	if mode == "leased" {
		src += "    lease: {batch: 100000}\n"
	}
	opts.Store = memstore.New()
	e, err := engine.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Load(bg, load(b, map[string]string{"edge.yaml": strings.ReplaceAll(src, "%MODE%", mode)})); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close(bg) })
	return e
}

// BenchmarkDecide is one ShouldRateLimit's worth of engine work: match a
// descriptor, build its counter key, check its limit, pick the status —
// into a Response reused from request to request, as the RLS adapter does
// (DecideInto).
func BenchmarkDecide(b *testing.B) {
	for _, mode := range []string{"strict", "leased"} {
		b.Run(mode, func(b *testing.B) {
			e := benchEngine(b, mode, engine.Options{})
			r := req("edge", "remote_address=10.0.0.1")
			var resp engine.Response
			b.ReportAllocs()
			for b.Loop() {
				if err := e.DecideInto(bg, r, t0, &resp); err != nil || resp.Code != engine.CodeOK {
					b.Fatal(resp, err)
				}
			}
		})
	}
	// Decide itself: a new Response per request.
	for _, mode := range []string{"strict", "leased"} {
		b.Run(mode+"/new-response", func(b *testing.B) {
			e := benchEngine(b, mode, engine.Options{})
			r := req("edge", "remote_address=10.0.0.1")
			b.ReportAllocs()
			for b.Loop() {
				if resp, err := e.Decide(bg, r, t0); err != nil || resp.Code != engine.CodeOK {
					b.Fatal(resp, err)
				}
			}
		})
	}
	// As many goroutines as the RLS bench's callers (ghz -c 50), all on one
	// descriptor: the same counter, the same store shard or L1 entry. The
	// store timeout is long: 25 goroutines per P that never block wait up to
	// 25 preemption slices (10ms each) between taking a store deadline and
	// using it, and the default 50ms would expire.
	for _, mode := range []string{"strict", "leased"} {
		b.Run(mode+"/parallel", func(b *testing.B) {
			e := benchEngine(b, mode, engine.Options{StoreTimeout: time.Minute})
			b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := req("edge", "remote_address=10.0.0.1")
				var resp engine.Response
				for pb.Next() {
					if err := e.DecideInto(bg, r, t0, &resp); err != nil || resp.Code != engine.CodeOK {
						b.Error(resp, err)
						return
					}
				}
			})
		})
	}
	// Four limits in one request: they share one store deadline.
	for _, mode := range []string{"strict", "leased"} {
		b.Run(mode+"/4-limits", func(b *testing.B) {
			m := "mode: " + mode
			if mode == "leased" {
				m += "\n    lease: {batch: 100000}"
			}
			e := newEngine(b, memstore.New(), budgetPolicy(m))
			r := req("b", "a=1", "b=1", "c=1", "d=1")
			var resp engine.Response
			b.ReportAllocs()
			for b.Loop() {
				if err := e.DecideInto(bg, r, t0, &resp); err != nil || resp.Code != engine.CodeOK {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
