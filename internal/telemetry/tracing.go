package telemetry

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttlekit/throttlekit/internal/redact"
)

// Tracing is OpenTelemetry tracing of ShouldRateLimit and the ext_proc
// gates (pkg/envoyrls): spans go to an OTLP collector, and where is the
// exporter's business: Endpoint, else the standard OTEL_EXPORTER_OTLP_*
// variables (endpoint, headers, certificate, insecure, timeout), which the
// OpenTelemetry exporters read themselves. The zero value is off.
type Tracing struct {
	Enabled           bool
	Protocol          string  // OTLP's transport: "http", else gRPC
	Endpoint          string  // the collector's URL; "" for the OTEL_* variables or the exporter's default
	ServiceName       string  // service.name of the spans' resource
	ServiceNamespace  string  // service.namespace; "" for none
	ServiceInstanceID string  // service.instance.id; "" for a random one per Start
	SamplingRate      float64 // the fraction of new traces recorded, 0 to 1; a call with trace context follows its caller
}

// Start builds the tracer provider and returns a tracer of it and the
// shutdown that flushes the spans still buffered (call it once); a nil
// tracer and a shutdown that does nothing when tracing is off. It logs, at
// info, where spans go, the endpoint's password hidden and the exporter's
// headers never shown. The exporter connects lazily: a collector that is
// down costs dropped spans (counted by the SDK, logged once), never an
// answer. An error is the exporter's, which t does not validate: serve's
// flags do.
func (t Tracing) Start(ctx context.Context, log *slog.Logger) (trace.Tracer, func(context.Context) error, error) {
	if !t.Enabled {
		return nil, func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch t.Protocol {
	case "http":
		var opts []otlptracehttp.Option
		if t.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(t.Endpoint))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		var opts []otlptracegrpc.Option
		if t.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(t.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the OTLP %s exporter: %w", t.Protocol, err)
	}
	instance := t.ServiceInstanceID
	if instance == "" {
		instance = rand.Text()
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", t.ServiceName),
		attribute.String("service.instance.id", instance),
	}
	if t.ServiceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", t.ServiceNamespace))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SamplingRate))),
	)
	// The endpoint may carry credentials (a URL's user info); the headers
	// (OTEL_EXPORTER_OTLP_HEADERS) often do, so they are never logged.
	log.Info("tracing", "protocol", t.Protocol, "endpoint", redact.URL(t.endpointForLog()), "service", t.ServiceName,
		"namespace", t.ServiceNamespace, "instance", instance, "sampling_rate", strconv.FormatFloat(t.SamplingRate, 'g', -1, 64))
	return tp.Tracer("github.com/throttlekit/throttlekit"), tp.Shutdown, nil
}

// endpointForLog says where spans go.
func (t Tracing) endpointForLog() string {
	if t.Endpoint != "" {
		return t.Endpoint
	}
	return "(OTEL_EXPORTER_OTLP_* or the exporter's default)"
}
