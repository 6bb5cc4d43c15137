package testenv

import "time"

// StoreDeadline bounds a store call that a test does not measure: the
// setup, probes and reads around what it judges, and the store options of
// an engine or limiter whose test judges answers rather than latency. It
// is far longer than any deadline the product sets, because a machine
// running two race-enabled test suites side by side stalls a round trip to
// a local server for a second or more, and such a stall must not fail a
// test about something else; a server that truly hangs still fails the
// test, well within go test's own timeout. A call a test does measure
// keeps its own tight deadline.
const StoreDeadline = 30 * time.Second
