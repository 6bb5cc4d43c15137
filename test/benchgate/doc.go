// Package benchgate is the live gate benchmark, `make bench-gate`: real
// `throttlekit serve` processes gate a real HTTP backend with a latency
// knee, driven by closed-loop clients that speak ext_proc as Envoy does.
// One sidecar, then four coordinated over Redis, for each controller at its
// defaults, beside no gate and a static limit sized for the backend; it
// prints one table (goodput as a fraction of the backend's ideal, p99, the
// backend's mean in flight). Its test, TestBenchGate, runs only when asked
// (-bench-gate): `make test` skips it.
package benchgate
