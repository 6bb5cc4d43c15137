//go:build race

package e2e

// raceBuild mirrors the race detector into the binary under test: run with
// -race, the suite builds throttlekit with -race too, so a data race in the
// sidecar fails the test that provoked it (and the build reuses the
// race-instrumented packages `go test -race ./...` compiles anyway).
const raceBuild = true
