package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Fake is a manual clock for tests. Time moves only when Advance or Set is
// called; timers and tickers whose deadline has been reached fire during that
// call, in deadline order, with the time set to their deadline. A Fake is safe
// for concurrent use. Create one with NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*fakeWaiter // armed timers and tickers, unsorted
	changed chan struct{} // closed and replaced whenever waiters changes
}

var _ Clock = (*Fake)(nil)

// NewFake returns a Fake reading t.
func NewFake(t time.Time) *Fake {
	return &Fake{now: t, changed: make(chan struct{})}
}

type fakeWaiter struct {
	clock    *Fake
	deadline time.Time
	period   time.Duration // > 0 for tickers
	ch       chan time.Time
	fn       func()
	armed    bool // guarded by clock.mu
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the fake time reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	w := &fakeWaiter{clock: f, ch: make(chan time.Time, 1)}
	f.arm(w, d)
	return w
}

// AfterFunc calls fn in its own goroutine when the fake time reaches now+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	w := &fakeWaiter{clock: f, fn: fn}
	f.arm(w, d)
	return w
}

// NewTicker returns a ticker firing every d of fake time. It panics if d <= 0,
// as time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	w := &fakeWaiter{clock: f, ch: make(chan time.Time, 1), period: d}
	f.arm(w, d)
	return fakeTicker{w}
}

type fakeTicker struct{ w *fakeWaiter }

func (t fakeTicker) C() <-chan time.Time { return t.w.ch }
func (t fakeTicker) Stop()               { t.w.Stop() }

func (f *Fake) arm(w *fakeWaiter, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armLocked(w, d)
}

func (f *Fake) armLocked(w *fakeWaiter, d time.Duration) {
	w.deadline = f.now.Add(d)
	if !w.armed {
		w.armed = true
		f.waiters = append(f.waiters, w)
	}
	f.notifyLocked()
}

func (f *Fake) disarmLocked(w *fakeWaiter) bool {
	if !w.armed {
		return false
	}
	w.armed = false
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			break
		}
	}
	f.notifyLocked()
	return true
}

func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Advance moves the fake time forward by d, firing every timer whose deadline
// is reached on the way.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	f.mu.Unlock()
	f.Set(target)
}

// Set moves the fake time to t (never backwards: an earlier t only fires
// nothing and leaves the time as it is), firing due timers in deadline order.
func (f *Fake) Set(t time.Time) {
	for {
		f.mu.Lock()
		if t.Before(f.now) {
			f.mu.Unlock()
			return
		}
		sort.Slice(f.waiters, func(i, j int) bool { return f.waiters[i].deadline.Before(f.waiters[j].deadline) })
		if len(f.waiters) == 0 || f.waiters[0].deadline.After(t) {
			f.now = t
			f.mu.Unlock()
			return
		}
		w := f.waiters[0]
		if w.deadline.After(f.now) {
			f.now = w.deadline
		}
		fired := f.now
		if w.period > 0 {
			w.deadline = w.deadline.Add(w.period)
		} else {
			f.disarmLocked(w)
		}
		f.mu.Unlock()
		if w.fn != nil {
			go w.fn()
		} else {
			select {
			case w.ch <- fired:
			default: // receiver not ready: drop, like time.Ticker
			}
		}
	}
}

// Waiters returns the number of armed timers and tickers.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// WaitForWaiters blocks until at least n timers or tickers are armed, or ctx
// ends. Tests use it to know a goroutine has reached its timer before calling
// Advance, instead of sleeping.
func (f *Fake) WaitForWaiters(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		got, changed := len(f.waiters), f.changed
		f.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (w *fakeWaiter) C() <-chan time.Time { return w.ch }

func (w *fakeWaiter) Stop() bool {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	active := w.clock.disarmLocked(w)
	w.drain()
	return active
}

func (w *fakeWaiter) Reset(d time.Duration) bool {
	w.clock.mu.Lock()
	defer w.clock.mu.Unlock()
	active := w.armed
	w.drain()
	w.clock.armLocked(w, d)
	return active
}

// drain drops a value sent but not received, matching Go 1.23 timers.
func (w *fakeWaiter) drain() {
	if w.ch == nil {
		return
	}
	select {
	case <-w.ch:
	default:
	}
}
