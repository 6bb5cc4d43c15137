// Package telemetry is the sidecar's observability that reads, never
// steers: the Prometheus instruments updated where things happen (Metrics:
// store calls, gRPC calls, gate releases, policy loads), the collectors
// that read the engine's rules, gates and cost limits, the store, the
// federation and the distributed gates at scrape time through what they
// are given (registries are the caller's: nothing here registers
// globally), and the OpenTelemetry tracer provider that exports spans over
// OTLP.
package telemetry
