package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/throttlekit/throttlekit/internal/telemetry"
)

// tracingConfig is serve's --tracing* flags: OpenTelemetry tracing of
// ShouldRateLimit and the ext_proc gates, which internal/telemetry starts
// (telemetry.Tracing.Start).
type tracingConfig struct{ telemetry.Tracing }

func (t *tracingConfig) define(fs *flag.FlagSet) {
	fs.BoolVar(&t.Enabled, "tracing", false, "export an OpenTelemetry span per ShouldRateLimit and per gated ext_proc request (W3C trace context from the gRPC metadata) to an OTLP collector")
	fs.StringVar(&t.Protocol, "tracing-protocol", "grpc", "OTLP transport: grpc (port 4317) or http (port 4318, protobuf)")
	fs.StringVar(&t.Endpoint, "tracing-endpoint", "", "the collector's URL (http://host:4317 for plaintext, https:// for TLS); default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost over TLS")
	fs.StringVar(&t.ServiceName, "tracing-service-name", "throttlekit", "service.name of the spans' resource")
	fs.StringVar(&t.ServiceNamespace, "tracing-service-namespace", "", "service.namespace of the spans' resource")
	fs.StringVar(&t.ServiceInstanceID, "tracing-service-instance-id", "", "service.instance.id of the spans' resource (default: a random id per process)")
	fs.Float64Var(&t.SamplingRate, "tracing-sampling-rate", 1, "fraction of new traces recorded, 0 to 1; a call that carries trace context follows its caller's sampling decision")
}

func (t *tracingConfig) validate() error {
	var errs []error
	if t.Protocol != "grpc" && t.Protocol != "http" {
		errs = append(errs, fmt.Errorf("--tracing-protocol %q: want grpc or http", t.Protocol))
	}
	if !(t.SamplingRate >= 0 && t.SamplingRate <= 1) {
		errs = append(errs, fmt.Errorf("--tracing-sampling-rate %v: want a fraction from 0 to 1", t.SamplingRate))
	}
	if t.Endpoint != "" && !strings.HasPrefix(t.Endpoint, "http://") && !strings.HasPrefix(t.Endpoint, "https://") {
		errs = append(errs, fmt.Errorf("--tracing-endpoint %q: want a URL, http://host:port (plaintext) or https://host:port (TLS)", Redact(t.Endpoint)))
	}
	if !t.Enabled {
		return errors.Join(errs...)
	}
	if t.ServiceName == "" {
		errs = append(errs, errors.New("--tracing-service-name is empty: name the service the spans come from"))
	}
	return errors.Join(errs...)
}
