package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/internal/otlptest"
)

// TestTracingOffStartsNothing: the zero Tracing is off: no tracer, a
// shutdown that does nothing, nothing logged.
func TestTracingOffStartsNothing(t *testing.T) {
	var b bytes.Buffer
	tracer, shutdown, err := Tracing{}.Start(context.Background(), slog.New(slog.NewTextHandler(&b, nil)))
	if err != nil || tracer != nil {
		t.Fatalf("off: tracer %v, err %v; want none", tracer, err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if b.Len() != 0 {
		t.Errorf("off, yet logged: %s", b.String())
	}
}

// TestTracingExportsOverOTLP: over either transport a span reaches the
// collector when shutdown flushes it, under the resource the config
// names; the log says where spans go, the endpoint's password hidden.
func TestTracingExportsOverOTLP(t *testing.T) {
	rcv := otlptest.Start(t)
	// Over HTTP the endpoint URL's path is used as it is (the exporter's
	// WithEndpointURL): /v1/traces is the collector's.
	for _, tc := range []struct{ protocol, addr, path string }{
		{"grpc", rcv.GRPCAddr, ""},
		{"http", rcv.HTTPAddr, "/v1/traces"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			var b bytes.Buffer
			cfg := Tracing{Enabled: true, Protocol: tc.protocol, Endpoint: "http://collector:s3cret@" + tc.addr + tc.path,
				ServiceName: "edge-rls", ServiceNamespace: "gateway", ServiceInstanceID: "pod-" + tc.protocol, SamplingRate: 1}
			tracer, shutdown, err := cfg.Start(context.Background(), slog.New(slog.NewTextHandler(&b, nil)))
			if err != nil {
				t.Fatal(err)
			}
			_, span := tracer.Start(context.Background(), "span-"+tc.protocol)
			span.End()
			if err := shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			sp := rcv.WaitNamed(t, "span-"+tc.protocol, 1)[0]
			if sp.Resource["service.name"] != "edge-rls" || sp.Resource["service.namespace"] != "gateway" || sp.Resource["service.instance.id"] != "pod-"+tc.protocol {
				t.Errorf("resource %v", sp.Resource)
			}
			log := b.String()
			for _, want := range []string{"msg=tracing", "protocol=" + tc.protocol, "collector:xxxxx@" + tc.addr, "sampling_rate=1"} {
				if !strings.Contains(log, want) {
					t.Errorf("the log lacks %q: %s", want, log)
				}
			}
			if strings.Contains(log, "s3cret") {
				t.Errorf("the log shows the endpoint's password: %s", log)
			}
		})
	}
}

// TestTracingSamplesNewTraces: at rate 0 a new trace is not recorded.
func TestTracingSamplesNewTraces(t *testing.T) {
	rcv := otlptest.Start(t)
	cfg := Tracing{Enabled: true, Protocol: "grpc", Endpoint: "http://" + rcv.GRPCAddr, ServiceName: "s", SamplingRate: 0}
	tracer, shutdown, err := cfg.Start(context.Background(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tracer.Start(context.Background(), "unsampled")
	if span.IsRecording() {
		t.Error("rate 0: a new trace's span is recorded")
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
