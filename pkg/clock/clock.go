// Package clock abstracts time so that every time-dependent part of throttlekit
// can be driven by a manual clock in tests.
//
// Pure cores take `now` as an argument; the thin wrappers that own timers (idle
// lease returns, background refills) take a Clock. Real returns the system
// clock; Fake is a manual clock whose timers fire only on Advance.
package clock

import "time"

// Clock tells the time and makes timers. Implementations are safe for
// concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has
	// passed.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTicker returns a ticker that sends the time on its channel every d.
	// d must be positive.
	NewTicker(d time.Duration) Ticker
}

// Timer is a single event. Stop and Reset behave as time.Timer's do (Go 1.23+
// semantics: no stale value is received after Stop or Reset returns).
type Timer interface {
	// C returns the channel the time is sent on; nil for AfterFunc timers.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset re-arms the timer to fire after d; it reports whether it was
	// active.
	Reset(d time.Duration) bool
}

// Ticker is a repeating event. Ticks that the receiver is not ready for are
// dropped, as with time.Ticker.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock. Its zero value is ready to use.
type Real struct{}

var _ Clock = Real{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }
