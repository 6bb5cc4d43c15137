package federation

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Health is a coordinator connection's health (HealthState) for every
// Region federated through it: one rule's failed lease marks the
// connection down for all of them, the first lease after ProbeAfter
// probes it (one at a time: the others answer by their outage mode until
// the probe is done), and an answer heals every rule. Create it with
// NewHealth; it is safe for concurrent use.
type Health struct {
	probeAfter time.Duration
	notify     func(down bool, err error)

	mu      sync.Mutex
	state   HealthState
	lastErr error
}

// Notify has f told of every change of health: down with the error that
// began an outage, up (nil) when the coordinator answers again. Call it
// before the Health is used; f runs on the caller's goroutine, outside
// the Health's lock.
func (h *Health) Notify(f func(down bool, err error)) { h.notify = f }

// NewHealth returns a healthy connection's Health that, once a call fails,
// leaves the coordinator alone for probeAfter (DefaultProbeAfter when 0).
func NewHealth(probeAfter time.Duration) *Health {
	if probeAfter <= 0 {
		probeAfter = DefaultProbeAfter
	}
	return &Health{probeAfter: probeAfter}
}

// Down reports whether the coordinator is marked unreachable.
func (h *Health) Down() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.state.DownUntil.IsZero()
}

// admit returns nil when a lease at now may ask c: it is healthy, or this
// caller's probe (Healthy) answered. Otherwise an error wrapping
// ErrCoordinatorDown.
func (h *Health) admit(ctx context.Context, c Coordinator, now time.Time) error {
	h.mu.Lock()
	a := h.state.Admit(now)
	err := h.downErr()
	h.mu.Unlock()
	switch a {
	case Ask:
		return nil
	case Down:
		return err
	}
	if perr := c.Healthy(ctx); perr != nil {
		h.failed(now, perr)
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.downErr()
	}
	h.answered()
	return nil
}

// failed records a call at now the coordinator did not answer, and
// reports whether it began an outage.
func (h *Health) failed(now time.Time, err error) bool {
	h.mu.Lock()
	h.lastErr = err
	began := h.state.Failed(now, h.probeAfter)
	h.mu.Unlock()
	if began && h.notify != nil {
		h.notify(true, err)
	}
	return began
}

// answered records a call the coordinator answered, and reports whether
// it ended an outage.
func (h *Health) answered() bool {
	h.mu.Lock()
	ended := h.state.Answered()
	h.mu.Unlock()
	if ended && h.notify != nil {
		h.notify(false, nil)
	}
	return ended
}

// downErr is the error a lease is answered with while the coordinator is
// down. h.mu is held.
func (h *Health) downErr() error {
	last := "unknown error"
	if h.lastErr != nil {
		last = h.lastErr.Error()
	}
	return fmt.Errorf("%w (%s); next probe at %s", ErrCoordinatorDown, last, h.state.DownUntil.UTC().Format(time.RFC3339Nano))
}
