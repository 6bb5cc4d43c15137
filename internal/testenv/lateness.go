package testenv

import (
	"os"
	"strings"
	"time"
)

// latenessTick is the period of a lateness meter's timer.
const latenessTick = 5 * time.Millisecond

// Lateness measures how late this process's own timers fire while a test
// judges time: on a loaded machine the code under test's timers and its
// answer are late by as much, so a band judged in wall time widens by what
// the meter measured rather than by a guess. Start one with
// MeasureLateness; End returns the most a timer fired late.
type Lateness struct {
	stop chan struct{}
	done chan struct{}
	most time.Duration // written by the meter's goroutine; read after done
}

// MeasureLateness starts a meter.
func MeasureLateness() *Lateness {
	l := &Lateness{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		timer := time.NewTimer(latenessTick)
		defer timer.Stop()
		due := time.Now().Add(latenessTick)
		for {
			select {
			case <-l.stop:
				l.most = max(l.most, time.Since(due))
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

// End stops the meter and returns the most a timer fired late, counting
// the tick in progress (a stall the meter is still in). Call it once.
func (l *Lateness) End() time.Duration {
	close(l.stop)
	<-l.done
	return l.most
}

// LoadAverage is the machine's load as /proc/loadavg gives it (1, 5 and 15
// minute averages), for a test to name the load it judged under.
func LoadAverage() string {
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
