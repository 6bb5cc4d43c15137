package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingConfig is OpenTelemetry tracing of ShouldRateLimit and the ext_proc
// gates (pkg/envoyrls): off unless --tracing (or envoyproxy/ratelimit's
// TRACING_ENABLED). Spans go to an OTLP collector; where is the exporter's
// business: --tracing-endpoint, else the standard OTEL_EXPORTER_OTLP_*
// variables (endpoint, headers, certificate, insecure, timeout), which the
// OpenTelemetry exporters read themselves.
type tracingConfig struct {
	enabled           bool
	protocol          string // grpc or http
	endpoint          string // a URL; "" for the OTEL_* variables or the exporter's default
	serviceName       string
	serviceNamespace  string
	serviceInstanceID string // "" for a random one
	samplingRate      float64
}

func (t *tracingConfig) define(fs *flag.FlagSet) {
	fs.BoolVar(&t.enabled, "tracing", false, "export an OpenTelemetry span per ShouldRateLimit and per gated ext_proc request (W3C trace context from the gRPC metadata) to an OTLP collector")
	fs.StringVar(&t.protocol, "tracing-protocol", "grpc", "OTLP transport: grpc (port 4317) or http (port 4318, protobuf)")
	fs.StringVar(&t.endpoint, "tracing-endpoint", "", "the collector's URL (http://host:4317 for plaintext, https:// for TLS); default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost over TLS")
	fs.StringVar(&t.serviceName, "tracing-service-name", "throttlekit", "service.name of the spans' resource")
	fs.StringVar(&t.serviceNamespace, "tracing-service-namespace", "", "service.namespace of the spans' resource")
	fs.StringVar(&t.serviceInstanceID, "tracing-service-instance-id", "", "service.instance.id of the spans' resource (default: a random id per process)")
	fs.Float64Var(&t.samplingRate, "tracing-sampling-rate", 1, "fraction of new traces recorded, 0 to 1; a call that carries trace context follows its caller's sampling decision")
}

func (t *tracingConfig) validate() error {
	var errs []error
	if t.protocol != "grpc" && t.protocol != "http" {
		errs = append(errs, fmt.Errorf("--tracing-protocol %q: want grpc or http", t.protocol))
	}
	if !(t.samplingRate >= 0 && t.samplingRate <= 1) {
		errs = append(errs, fmt.Errorf("--tracing-sampling-rate %v: want a fraction from 0 to 1", t.samplingRate))
	}
	if t.endpoint != "" && !strings.HasPrefix(t.endpoint, "http://") && !strings.HasPrefix(t.endpoint, "https://") {
		errs = append(errs, fmt.Errorf("--tracing-endpoint %q: want a URL, http://host:port (plaintext) or https://host:port (TLS)", Redact(t.endpoint)))
	}
	if !t.enabled {
		return errors.Join(errs...)
	}
	if t.serviceName == "" {
		errs = append(errs, errors.New("--tracing-service-name is empty: name the service the spans come from"))
	}
	return errors.Join(errs...)
}

// start builds the tracer provider and returns a tracer of it and the
// shutdown that flushes the spans still buffered; a nil tracer when tracing
// is off. The exporter connects lazily: a collector that is down costs
// dropped spans (counted by the SDK, logged once), never an answer.
func (t *tracingConfig) start(ctx context.Context, log *slog.Logger) (trace.Tracer, func(context.Context) error, error) {
	if !t.enabled {
		return nil, func(context.Context) error { return nil }, nil
	}
	var exp sdktrace.SpanExporter
	var err error
	switch t.protocol {
	case "http":
		var opts []otlptracehttp.Option
		if t.endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(t.endpoint))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		var opts []otlptracegrpc.Option
		if t.endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(t.endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--tracing: the OTLP %s exporter: %w", t.protocol, err)
	}
	instance := t.serviceInstanceID
	if instance == "" {
		instance = rand.Text()
	}
	attrs := []attribute.KeyValue{
		attribute.String("service.name", t.serviceName),
		attribute.String("service.instance.id", instance),
	}
	if t.serviceNamespace != "" {
		attrs = append(attrs, attribute.String("service.namespace", t.serviceNamespace))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.samplingRate))),
	)
	// The endpoint may carry credentials (a URL's user info); the headers
	// (OTEL_EXPORTER_OTLP_HEADERS) often do, so they are never logged.
	log.Info("tracing", "protocol", t.protocol, "endpoint", Redact(t.endpointForLog()), "service", t.serviceName,
		"namespace", t.serviceNamespace, "instance", instance, "sampling_rate", strconv.FormatFloat(t.samplingRate, 'g', -1, 64))
	return tp.Tracer("github.com/throttlekit/throttlekit"), tp.Shutdown, nil
}

// endpointForLog says where spans go.
func (t *tracingConfig) endpointForLog() string {
	if t.endpoint != "" {
		return t.endpoint
	}
	return "(OTEL_EXPORTER_OTLP_* or the exporter's default)"
}

// tracing maps envoyproxy/ratelimit's TRACING_* variables to the
// --tracing-* flags; value gives a variable's value or, when upstream's
// defaults apply, its default. readUpstream calls it.
func (u *upstreamEnv) tracing(set map[string]string, value func(string) string) []error {
	names := []string{"TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}
	has := func(name string) bool { _, ok := set[name]; return ok }
	on, err := strconv.ParseBool(set["TRACING_ENABLED"])
	if has("TRACING_ENABLED") && err != nil {
		return []error{fmt.Errorf("TRACING_ENABLED=%q: want true or false", set["TRACING_ENABLED"])}
	}
	if !on {
		if has("TRACING_ENABLED") {
			u.set("--tracing", "false", false, "TRACING_ENABLED")
		}
		for _, name := range names {
			if has(name) {
				u.ignore(name, "TRACING_ENABLED is not true")
			}
		}
		return nil
	}
	var errs []error
	u.set("--tracing", "true", false, "TRACING_ENABLED")
	// Upstream's defaults (service RateLimit, OTLP over HTTP) apply with
	// TRACING_ENABLED, which only upstream's environment sets.
	switch p := strings.ToLower(value("TRACING_EXPORTER_PROTOCOL")); p {
	case "", "http":
		u.set("--tracing-protocol", "http", !has("TRACING_EXPORTER_PROTOCOL"), "TRACING_EXPORTER_PROTOCOL")
	case "grpc":
		u.set("--tracing-protocol", "grpc", false, "TRACING_EXPORTER_PROTOCOL")
	default:
		errs = append(errs, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", set["TRACING_EXPORTER_PROTOCOL"]))
	}
	if v := value("TRACING_SERVICE_NAME"); v != "" {
		u.set("--tracing-service-name", v, !has("TRACING_SERVICE_NAME"), "TRACING_SERVICE_NAME")
	}
	for _, f := range []struct{ name, flag string }{
		{"TRACING_SERVICE_NAMESPACE", "--tracing-service-namespace"},
		{"TRACING_SERVICE_INSTANCE_ID", "--tracing-service-instance-id"},
		{"TRACING_SAMPLING_RATE", "--tracing-sampling-rate"},
	} {
		if has(f.name) {
			u.set(f.flag, set[f.name], false, f.name)
		}
	}
	return errs
}
