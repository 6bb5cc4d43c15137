package testenv

import "time"

// Eventually waits for cond, polling it every millisecond, and reports
// whether it came true within 10 s: the way a test waits on a condition
// instead of sleeping for a guessed time.
func Eventually(cond func() bool) bool {
	deadline := time.After(10 * time.Second)
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
