// Package telemetry is the sidecar's observability that reads, never
// steers: Prometheus collectors that read the federation's and the
// distributed gates' state at scrape time through the funcs they are
// given (registries are the caller's: nothing here registers globally),
// and the OpenTelemetry tracer provider that exports spans over OTLP.
package telemetry
