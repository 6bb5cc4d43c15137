package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/throttlekit/throttlekit/internal/otlptest"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
)

// askTraced sends one ShouldRateLimit for domain t of testPolicy, with W3C
// trace context in its metadata as Envoy's tracer sends it.
func askTraced(t *testing.T, s *sidecar, traceparent string) {
	t.Helper()
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "t",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if err != nil {
		t.Fatal(err)
	}
}

const testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestServeIsNotTracedByDefault: without --tracing no exporter is built and
// nothing is sent, even with an OTLP endpoint in the environment.
func TestServeIsNotTracedByDefault(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPCAddr)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
	s := startServe(t, nil, nil)
	askTraced(t, s, "00-"+testTraceID+"-00f067aa0ba902b7-01")
	if strings.Contains(s.stderr.String(), `"msg":"tracing"`) {
		t.Errorf("tracing started without --tracing:\n%s", s.stderr)
	}
	// A traced sidecar started after it exports its span; by then the first
	// would have too.
	traced := startServe(t, []string{"--tracing", "--tracing-endpoint", "http://" + rcv.GRPCAddr}, nil)
	askTraced(t, traced, "00-"+testTraceID+"-00f067aa0ba902b7-01")
	if spans := rcv.WaitNamed(t, "ShouldRateLimit", 1); len(spans) != 1 {
		t.Errorf("%d spans, want only the traced sidecar's", len(spans))
	}
}

// TestServeExportsSpansOverOTLPGRPC: --tracing sends a span per decision to
// the collector over OTLP/gRPC, the child of the caller's trace context,
// under the service name and sampling the flags give.
func TestServeExportsSpansOverOTLPGRPC(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "1") // the batcher's delay, in ms: export at once
	s := startServe(t, []string{"--tracing", "--tracing-endpoint", "http://" + rcv.GRPCAddr,
		"--tracing-service-name", "edge-rls", "--tracing-service-instance-id", "pod-1"}, nil)
	askTraced(t, s, "00-"+testTraceID+"-00f067aa0ba902b7-01")
	askTraced(t, s, "00-"+testTraceID+"-00f067aa0ba902b7-00") // not sampled by the caller
	spans := rcv.WaitNamed(t, "ShouldRateLimit", 1)
	sp := spans[0]
	if fmt.Sprintf("%x", sp.TraceId) != testTraceID || fmt.Sprintf("%x", sp.ParentSpanId) != "00f067aa0ba902b7" {
		t.Errorf("span trace %x parent %x, want the caller's", sp.TraceId, sp.ParentSpanId)
	}
	if sp.Resource["service.name"] != "edge-rls" || sp.Resource["service.instance.id"] != "pod-1" {
		t.Errorf("resource %v", sp.Resource)
	}
	if sp.Attr(envoyrls.AttrDomain) != "t" || sp.Attr(envoyrls.AttrOutcome) != "OK" || sp.Attr(envoyrls.AttrRules) != "t/k" {
		t.Errorf("span attributes %v", sp.Attributes)
	}
	// The unsampled call's span never comes: a third, sampled one arrives
	// after it, and is the second span received.
	askTraced(t, s, "00-"+testTraceID+"-00f067aa0ba902b8-01")
	if spans := rcv.WaitNamed(t, "ShouldRateLimit", 2); fmt.Sprintf("%x", spans[1].ParentSpanId) != "00f067aa0ba902b8" {
		t.Errorf("second span exported has parent %x: the caller's unsampled flag was not followed", spans[1].ParentSpanId)
	}
}

// TestServeTracesFromTheUpstreamEnvironment: TRACING_ENABLED with
// upstream's defaults (OTLP over HTTP, service RateLimit) and the standard
// OTEL_EXPORTER_OTLP_* variables, read by the exporter: the endpoint and
// headers reach the collector, and the headers, which hold credentials,
// are never logged.
func TestServeTracesFromTheUpstreamEnvironment(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.HTTPAddr)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer s3cret-token")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "1")
	s := startServe(t, nil, map[string]string{"TRACING_ENABLED": "true", "TRACING_SERVICE_NAMESPACE": "gateway", "TRACING_SAMPLING_RATE": "1"})
	askTraced(t, s, "00-"+testTraceID+"-00f067aa0ba902b7-01")
	sp := rcv.WaitNamed(t, "ShouldRateLimit", 1)[0]
	if sp.Resource["service.name"] != "RateLimit" || sp.Resource["service.namespace"] != "gateway" || sp.Resource["service.instance.id"] == "" {
		t.Errorf("resource %v, want upstream's service name RateLimit, namespace gateway, an instance id", sp.Resource)
	}
	if h := rcv.Headers(); len(h) == 0 || strings.Join(h[0].Get("authorization"), "") != "Bearer s3cret-token" {
		t.Errorf("the collector got headers %v", h)
	}
	log := s.stderr.String()
	for _, want := range []string{`"protocol":"http"`, "TRACING_ENABLED", "TRACING_SERVICE_NAMESPACE"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "s3cret") {
		t.Errorf("the log holds the OTLP headers' secret:\n%s", log)
	}
}

// TestTracingFlagsSayWhatIsWrong: bad tracing settings stop serve with an
// error naming the flag or variable and what it wants.
func TestTracingFlagsSayWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--tracing", "--tracing-protocol", "thrift"}, nil, "--tracing-protocol \"thrift\": want grpc or http"},
		{[]string{"--tracing", "--tracing-sampling-rate", "1.5"}, nil, "--tracing-sampling-rate 1.5: want a fraction from 0 to 1"},
		{[]string{"--tracing", "--tracing-endpoint", "collector:4317"}, nil, "want a URL, http://host:port (plaintext) or https://host:port (TLS)"},
		{nil, map[string]string{"TRACING_ENABLED": "yes please"}, `TRACING_ENABLED="yes please": want true or false`},
		{nil, map[string]string{"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "zipkin"}, `TRACING_EXPORTER_PROTOCOL="zipkin": want http or grpc`},
	} {
		s := startServe(t, c.args, c.env)
		if s.grpcAddr != "" || s.code == 0 || !strings.Contains(s.stderr.String(), c.want) {
			t.Errorf("%v %v: exit %d, stderr:\n%s\nwant an error with %q", c.args, c.env, s.code, s.stderr, c.want)
		}
	}
}
