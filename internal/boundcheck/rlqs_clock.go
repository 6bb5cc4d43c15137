package boundcheck

import (
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// simClock is the one clock of an RLQS run: every sidecar, its engine and
// every Envoy read it, and only the driver moves it, one timer at a time
// (the earliest deadline first, then the earliest armed), so that what a
// timer starts settles before the next fires: two timers due at one
// instant fire in an order the schedule fixes, not in the order goroutines
// happen to run. clock.Fake fires every due timer in one Set and leaves
// their callbacks racing. Safe for concurrent use.
type simClock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64      // arming order, the tie-break of equal deadlines
	armed   []*simTimer // small (a few per sidecar and Envoy): scanned, not heaped
	running int         // AfterFunc callbacks in flight
	notify  func()      // called when a callback ends
}

func newSimClock(now time.Time, notify func()) *simClock {
	return &simClock{now: now, notify: notify}
}

// simOwner is one process's view of the clock: a sidecar incarnation or an
// Envoy. It counts the channel timers fired for it (an Envoy's report
// ticks, which the driver waits to see handled), and a killed owner's
// timers never fire again: a killed process has none.
type simOwner struct {
	clk   *simClock
	fired int  // channel timers fired; guarded by clk.mu
	dead  bool // guarded by clk.mu
}

var _ clock.Clock = (*simOwner)(nil)

func (c *simClock) owner() *simOwner { return &simOwner{clk: c} }

// simTimer is a timer or ticker of a simOwner.
type simTimer struct {
	o        *simOwner
	deadline time.Time
	seq      uint64
	period   time.Duration // a ticker's; 0 for a timer
	ch       chan time.Time
	fn       func()
	armed    bool // guarded by o.clk.mu
}

// Now returns the simulated time.
func (o *simOwner) Now() time.Time {
	o.clk.mu.Lock()
	defer o.clk.mu.Unlock()
	return o.clk.now
}

// NewTimer returns a timer that fires when the driver reaches now+d.
func (o *simOwner) NewTimer(d time.Duration) clock.Timer {
	t := &simTimer{o: o, ch: make(chan time.Time, 1)}
	o.clk.arm(t, d)
	return t
}

// AfterFunc calls f in its own goroutine when the driver reaches now+d;
// the driver waits for it to return before it moves on.
func (o *simOwner) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &simTimer{o: o, fn: f}
	o.clk.arm(t, d)
	return t
}

// NewTicker returns a ticker firing every d.
func (o *simOwner) NewTicker(d time.Duration) clock.Ticker {
	if d <= 0 {
		panic("boundcheck: non-positive interval for NewTicker")
	}
	t := &simTimer{o: o, ch: make(chan time.Time, 1), period: d}
	o.clk.arm(t, d)
	return simTicker{t}
}

type simTicker struct{ t *simTimer }

func (k simTicker) C() <-chan time.Time { return k.t.ch }
func (k simTicker) Stop()               { k.t.Stop() }

func (t *simTimer) C() <-chan time.Time { return t.ch }

// Stop disarms t; as Go 1.23 timers, no value sent before is received after.
func (t *simTimer) Stop() bool {
	c := t.o.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.disarmLocked(t)
	t.drain()
	return was
}

// Reset re-arms t to fire d after now.
func (t *simTimer) Reset(d time.Duration) bool {
	c := t.o.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.armed
	t.drain()
	c.armLocked(t, d)
	return was
}

func (t *simTimer) drain() {
	if t.ch == nil {
		return
	}
	select {
	case <-t.ch:
	default:
	}
}

func (c *simClock) arm(t *simTimer, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armLocked(t, d)
}

func (c *simClock) armLocked(t *simTimer, d time.Duration) {
	if t.o.dead {
		return
	}
	c.seq++
	t.deadline, t.seq = c.now.Add(max(d, 0)), c.seq
	if !t.armed {
		t.armed = true
		c.armed = append(c.armed, t)
	}
}

func (c *simClock) disarmLocked(t *simTimer) bool {
	if !t.armed {
		return false
	}
	t.armed = false
	for i, x := range c.armed {
		if x == t {
			c.armed = append(c.armed[:i], c.armed[i+1:]...)
			break
		}
	}
	return true
}

// kill disarms every timer of o and keeps it from arming more.
func (c *simClock) kill(o *simOwner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o.dead = true
	for _, t := range append([]*simTimer(nil), c.armed...) {
		if t.o == o {
			c.disarmLocked(t)
		}
	}
}

// next returns the earliest armed timer (nil: none).
func (c *simClock) nextLocked() *simTimer {
	var first *simTimer
	for _, t := range c.armed {
		if first == nil || t.deadline.Before(first.deadline) || t.deadline.Equal(first.deadline) && t.seq < first.seq {
			first = t
		}
	}
	return first
}

// fireNext fires the earliest timer due at or before until, moving the
// time to its deadline (never back), and reports whether one was.
func (c *simClock) fireNext(until time.Time) bool {
	c.mu.Lock()
	t := c.nextLocked()
	if t == nil || t.deadline.After(until) {
		c.mu.Unlock()
		return false
	}
	if t.deadline.After(c.now) {
		c.now = t.deadline
	}
	at := c.now
	if t.period > 0 {
		c.seq++
		t.deadline, t.seq = t.deadline.Add(t.period), c.seq
	} else {
		c.disarmLocked(t)
	}
	if t.fn != nil {
		c.running++
		c.mu.Unlock()
		go func() {
			t.fn()
			c.mu.Lock()
			c.running--
			c.mu.Unlock()
			c.notify()
		}()
		return true
	}
	t.o.fired++
	c.mu.Unlock()
	select {
	case t.ch <- at:
	default: // the receiver has not taken the last one: dropped, as time.Ticker does
	}
	return true
}

// time returns the simulated time.
func (c *simClock) time() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// set moves the time to at (never back).
func (c *simClock) set(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.After(c.now) {
		c.now = at
	}
}

// idle reports whether no AfterFunc callback is running.
func (c *simClock) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running == 0
}

// firedFor is how many channel timers have fired for o.
func (c *simClock) firedFor(o *simOwner) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return o.fired
}
