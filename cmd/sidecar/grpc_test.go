package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// panickyChooser chooses gates as the engine does, and panics while boom is
// set: a bug in gate selection.
type panickyChooser struct {
	*engine.Engine
	boom atomic.Bool
}

func (c *panickyChooser) ChooseGate(authority, path string, header func(string) (string, bool)) (engine.GateChoice, bool) {
	if c.boom.Load() {
		panic("chooser exploded")
	}
	return c.Engine.ChooseGate(authority, path, header)
}

func gateEngine(t *testing.T) *engine.Engine {
	t.Helper()
	return gatesEngine(t, "concurrency:\n  - name: checkout\n    match: {path_prefix: /checkout}\n    controller: aimd\n    min_limit: 1\n    max_limit: 1\n")
}

// gatesEngine is an engine on the memory store loaded with the gates of
// one policy file, src, closed when the test ends.
func gatesEngine(t *testing.T, src string) *engine.Engine {
	t.Helper()
	d, err := policy.Parse("gates.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Load(context.Background(), &policy.Set{Gates: d.Gates, Hash: "g"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

// extProcCall runs one ext_proc stream as Envoy does: request headers, then
// (when status is set) response headers with that :status, then the end of
// the stream. It returns the first error the stream answers.
func extProcCall(ctx context.Context, c extprocv3.ExternalProcessorClient, path, status string) error {
	hdrs := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i+1 < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	s, err := c.Process(ctx)
	if err != nil {
		return err
	}
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hdrs(":method", "GET", ":authority", "shop", ":path", path)}}}); err != nil {
		return err
	}
	if _, err := s.Recv(); err != nil {
		return err
	}
	if status != "" {
		if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: hdrs(":status", status)}}}); err != nil {
			return err
		}
		if _, err := s.Recv(); err != nil {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if _, err := s.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// serveExtProc serves p on loopback behind the sidecar's interceptors (m,
// logging to logf) and returns a client of it; both stop with the test.
func serveExtProc(t *testing.T, m *metrics, logf func(string, ...any), p extprocv3.ExternalProcessorServer) extprocv3.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(m.serverOptions(logf)...)
	extprocv3.RegisterExternalProcessorServer(gs, p)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// gathered is the value of the counter family name, or the observation
// count of the histogram family name, summed over the series whose labels
// include want.
func gathered(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			n += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

// TestExtProcStreamPanicIsRecovered: a panic in one ext_proc stream (in gate
// selection, or while the stream holds a gate's slot) answers that stream
// INTERNAL, frees the slot, is logged and counted as the unary interceptor
// counts one (throttlekit_grpc_requests_total{method, code="Internal"}), and
// the server goes on serving. Streams are counted by code and timed like
// unary calls. Real gRPC over a loopback socket, with the interceptors serve
// installs.
func TestExtProcStreamPanicIsRecovered(t *testing.T) {
	e := gateEngine(t)
	m := newMetrics(e, nil)
	var mu sync.Mutex
	var logged []string
	logf := func(msg string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintln(append([]any{msg}, args...)...))
	}
	chooser := &panickyChooser{Engine: e}
	var clockPanics atomic.Bool // the next reading of the clock panics, once
	now := func() time.Time {
		if clockPanics.CompareAndSwap(true, false) {
			panic("clock exploded")
		}
		return time.Now()
	}

	c := serveExtProc(t, m, logf, envoyrls.NewProcessorServer(chooser, envoyrls.ProcessorOptions{Now: now, Observe: m.observeGate}))
	ctx := context.Background()
	inflight := func() int { return e.GateSnapshots()[0].Inflight }

	// Gate selection panics.
	chooser.boom.Store(true)
	err := extProcCall(ctx, c, "/checkout", "200")
	chooser.boom.Store(false)
	if status.Code(err) != codes.Internal || strings.ContainsAny(status.Convert(err).Message(), "\r\n") {
		t.Fatalf("panicking chooser: %v, want INTERNAL with a one-line message", err)
	}
	// The server still serves.
	if err := extProcCall(ctx, c, "/checkout", "200"); err != nil {
		t.Fatalf("after a panic: %v", err)
	}
	// A panic while the stream holds the gate's only slot (the clock, read
	// to release it on the response headers) frees the slot as dropped.
	if err := extProcCall(ctx, c, "/catalog", ""); err != nil { // no gate: untouched
		t.Fatal(err)
	}
	clockPanics.Store(true)
	err = extProcCall(ctx, c, "/checkout", "200")
	if status.Code(err) != codes.Internal {
		t.Fatalf("panicking clock: %v, want INTERNAL", err)
	}
	if n := inflight(); n != 0 {
		t.Fatalf("a stream that panicked kept its slot: inflight %d", n)
	}
	if err := extProcCall(ctx, c, "/checkout", "200"); err != nil {
		t.Fatalf("the gate after a panic: %v", err)
	}

	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"throttlekit_grpc_requests_total", map[string]string{"method": "Process", "code": "Internal"}, 2},
		{"throttlekit_grpc_requests_total", map[string]string{"method": "Process", "code": "OK"}, 3},
		{"throttlekit_grpc_requests_total", map[string]string{"method": "Process"}, 5},
		{"throttlekit_grpc_stream_duration_seconds", map[string]string{"method": "Process"}, 5},
	} {
		if got := gathered(t, m.reg, tc.name, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 2 || !strings.Contains(logged[0], "chooser exploded") || !strings.Contains(logged[1], "clock exploded") ||
		!strings.Contains(logged[0], "/envoy.service.ext_proc.v3.ExternalProcessor/Process") {
		t.Errorf("logged %q, want each panic with its method", logged)
	}
}
