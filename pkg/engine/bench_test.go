package engine_test

import (
	"strings"
	"testing"

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

// BenchmarkDecide is one ShouldRateLimit's worth of engine work: match a
// descriptor, build its counter key, check its limit, pick the status.
func BenchmarkDecide(b *testing.B) {
	for _, mode := range []string{"strict", "leased"} {
		b.Run(mode, func(b *testing.B) {
			src := benchPolicy
			if mode == "leased" {
				src += "    lease: {batch: 100000}\n"
			}
			files := map[string]string{"edge.yaml": strings.ReplaceAll(src, "%MODE%", mode)}
			e := newEngine(b, memstore.New(), files)
			r := req("edge", "remote_address=10.0.0.1")
			b.ReportAllocs()
			for b.Loop() {
				resp, err := e.Decide(bg, r, t0)
				if err != nil || resp.Code != engine.CodeOK {
					b.Fatal(resp, err)
				}
			}
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
			b.ReportAllocs()
			for b.Loop() {
				resp, err := e.Decide(bg, r, t0)
				if err != nil || resp.Code != engine.CodeOK {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
