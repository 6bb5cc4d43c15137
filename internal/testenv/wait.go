package testenv

import "time"

// Eventually waits for cond, polling it every millisecond, and reports
// whether it came true within 10 s: the way a test waits on a condition
// instead of sleeping for a guessed time.
func Eventually(cond func() bool) bool {
	return EventuallyWithin(10*time.Second, cond)
}

// EventuallyWithin is Eventually with a deadline of its own: for a wait a
// loaded machine stretches that the test does not measure (a replica's
// full sync after a failover), StoreDeadline.
func EventuallyWithin(within time.Duration, cond func() bool) bool {
	deadline := time.After(within)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
	return true
}
