// Package e2e tests the throttlekit binary from the outside: it builds
// cmd/sidecar once, starts it as a process on loopback ports with the
// example policies of config/ plus a policy domain of its own, and checks
// what Envoy, an operator and Prometheus would see — RateLimitService
// answers over a real gRPC connection, the HTTP endpoints, hot reload,
// Redis outages (a real redis-server from internal/testenv, killed and
// restarted) and the SIGTERM drain.
//
// Everything lives in the _test files; this file only names the package.
package e2e
