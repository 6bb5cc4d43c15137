package envoyrls_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

const benchGates = `
concurrency:
  - name: open
    match: {path_prefix: /open}
    controller: aimd
    min_limit: 1000
    max_limit: 1000
  - name: full
    match: {path_prefix: /full}
    controller: aimd
    min_limit: 1
    max_limit: 1
`

// BenchmarkExtProcStream is one ext_proc stream over a loopback gRPC
// connection, as Envoy opens it for a request: request headers, the answer,
// end of stream. "admitted" goes through a gate with room (the stream's end
// releases the slot), "rejected" through a gate at its limit (a 503). Both
// gates' statistics windows are full, as under load.
func BenchmarkExtProcStream(b *testing.B) {
	d, err := policy.Parse("gates.yaml", []byte(benchGates))
	if err != nil {
		b.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Load(context.Background(), &policy.Set{Gates: d.Gates, Hash: "bench"}); err != nil {
		b.Fatal(err)
	}
	noHeader := func(string) (string, bool) { return "", false }
	t0 := time.Now()
	for _, path := range []string{"/open", "/full"} {
		c, ok := e.ChooseGate("shop", path, noHeader)
		if !ok {
			b.Fatalf("no gate for %s", path)
		}
		for i := range adaptive.DefaultStatsWindow {
			l, _ := c.Gate.TryAcquire(t0)
			l.Release(t0.Add(time.Duration(i)*time.Microsecond), adaptive.OK)
		}
	}
	full, _ := e.ChooseGate("shop", "/full", noHeader)
	if _, ok := full.Gate.TryAcquire(t0); !ok {
		b.Fatal("full gate refused its only slot")
	}
	c := extprocv3.NewExternalProcessorClient(listen(b, func(gs *grpc.Server) {
		extprocv3.RegisterExternalProcessorServer(gs, envoyrls.NewProcessorServer(e, envoyrls.ProcessorOptions{}))
	}))
	ctx := context.Background()
	for _, tc := range []struct {
		name, path string
		admitted   bool
	}{{"admitted", "/open/x", true}, {"rejected", "/full/x", false}} {
		req := requestHeaders(tc.path)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.Process(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Send(req); err != nil {
					b.Fatal(err)
				}
				resp, err := s.Recv()
				if err != nil {
					b.Fatal(err)
				}
				if (resp.GetRequestHeaders() != nil) != tc.admitted {
					b.Fatalf("answer %v", resp)
				}
				if err := s.CloseSend(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); !errors.Is(err, io.EOF) {
					b.Fatalf("end of stream: %v", err)
				}
			}
		})
	}
}
