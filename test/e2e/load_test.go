package e2e

import (
	"os"
	"strings"
	"time"
)

// slackStoreTimeout is --store-timeout for a sidecar whose test does not
// measure the store's deadline: long enough that a loaded machine (a
// second make test beside this one) cannot miss it, so that a slow healthy
// call is never taken for the store failing.
const slackStoreTimeout = 2 * time.Second

// sampleDeadline bounds a wait for the traffic a test samples before it
// judges (healthy answers before a fault, calls before a signal). The rate
// they come at is the machine's and is not judged (a loaded one answers a
// tenth as fast): the deadline only stops a sidecar that answers nothing.
const sampleDeadline = 60 * time.Second

// judgeAttempts is how many times a test that judges time measures before
// it fails: a judgement the load spoiled is made again, and only a second
// and third spoiled one fail, naming the load each saw.
const judgeAttempts = 3

// latenessTick is the period of a lateness meter's timer.
const latenessTick = 5 * time.Millisecond

// lateness measures how late this process's own timers fire while a test
// judges time: on a loaded machine the sidecar's timers and its reply are
// late by as much, so a band judged in wall time widens by what the meter
// measured rather than by a guess. Start it with measureLateness; end
// returns the most a timer fired late.
type lateness struct {
	stop chan struct{}
	done chan struct{}
	most time.Duration // written by the meter's goroutine; read after done
}

// measureLateness starts a meter.
func measureLateness() *lateness {
	l := &lateness{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		timer := time.NewTimer(latenessTick)
		defer timer.Stop()
		due := time.Now().Add(latenessTick)
		for {
			select {
			case <-l.stop:
				return
			case <-timer.C:
				now := time.Now()
				l.most = max(l.most, now.Sub(due))
				due = now.Add(latenessTick)
				timer.Reset(latenessTick)
			}
		}
	}()
	return l
}

// end stops the meter and returns the most a timer fired late. It is
// called once.
func (l *lateness) end() time.Duration {
	close(l.stop)
	<-l.done
	return l.most
}

// loadAverage is the machine's load as /proc/loadavg gives it (1, 5 and 15
// minute averages), for a test to name the load it judged under.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}
