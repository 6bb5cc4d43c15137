package clock_test

import (
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// A fake clock moves only when told to; its timers fire during Advance.
func ExampleFake() {
	c := clock.NewFake(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	t := c.NewTimer(time.Minute)
	c.Advance(30 * time.Second)
	select {
	case <-t.C():
		fmt.Println("fired early")
	default:
		fmt.Println("not yet at", c.Now().Format(time.TimeOnly))
	}
	c.Advance(30 * time.Second)
	fmt.Println("fired at", (<-t.C()).Format(time.TimeOnly))
	// Output:
	// not yet at 00:00:30
	// fired at 00:01:00
}
