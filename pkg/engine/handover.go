package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Hand-over. A reload swaps the compiled policy in one atomic store; the
// limiters of rules that changed or vanished must then be closed (their
// leased credits go back to the store). Requests that loaded an older policy
// may still be using them — and a limiter kept across reloads belongs to
// several policies at once — so a retired limiter is closed only once every
// policy up to the one that dropped it has drained: no request acquired it
// and has not released it. No request ever meets a limiter a reload closed,
// and none retries.
//
// Load does not wait for the requests (one may be waiting on a slow store):
// whoever drains the last policy closes the limiters — Load itself when no
// request is in flight, else the request whose release drains it, which
// hands the store calls of the closing to a goroutine. A request pays one
// atomic add to acquire its policy and one to release it.

// retiredBias is subtracted from compiled.users when the policy is retired:
// far below any count of requests, so a retired policy's count is negative
// (an acquire that sees it looks again), and exactly −retiredBias once no
// request uses it.
const retiredBias = 1 << 62

// handover is the queue of retired policies whose requests may still run,
// oldest first, with the limiters to close once each has drained along with
// every older one. The zero value is ready; it is safe for concurrent use.
type handover struct {
	mu      sync.Mutex
	pending []retirement
	closing sync.WaitGroup // goroutines closing limiters; Add under mu
}

type retirement struct {
	c        *compiled
	limiters []*gale.Limiter // dropped by c's successor
}

// acquire returns the policy in use, held until its release. A request that
// raced a reload and found the policy just retired takes the next one; it
// fails only after Close.
func (e *Engine) acquire() (*compiled, error) {
	for {
		c := e.cur.Load()
		if c.users.Add(1) > 0 {
			return c, nil
		}
		c.release()
		if e.cur.Load() == c {
			return nil, errEngineClosed // retired but still in place: Close did it
		}
	}
}

// release ends a request's use of c. The last request of a retired policy
// closes what its drain makes ready, in the background.
func (c *compiled) release() {
	if c.users.Add(-1) == -retiredBias {
		if ready := c.handover.ready(); len(ready) > 0 {
			go func() {
				defer c.handover.closing.Done()
				if err := closeLimiters(context.Background(), ready); err != nil {
					c.log.Warn("returning leased credits of replaced rules failed", "err", err)
				}
			}()
		}
	}
}

// retire queues prev, just swapped out, with the limiters its successor
// dropped, and closes with ctx those that no request can use any more.
func (e *Engine) retire(ctx context.Context, prev *compiled, limiters []*gale.Limiter) error {
	h := &e.handover
	h.mu.Lock()
	h.pending = append(h.pending, retirement{c: prev, limiters: limiters})
	h.mu.Unlock()
	prev.users.Add(-retiredBias)
	ready := h.ready()
	if ready == nil {
		return nil
	}
	defer h.closing.Done()
	return closeLimiters(ctx, ready)
}

// ready pops the retirements whose policy, and every older one, has drained,
// and returns their limiters. When it returns some, it has counted one
// closing in h.closing, which the caller marks done once it has closed them.
func (h *handover) ready() []*gale.Limiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*gale.Limiter
	n := 0
	for n < len(h.pending) && h.pending[n].c.users.Load() == -retiredBias {
		out = append(out, h.pending[n].limiters...)
		n++
	}
	if n == 0 {
		return nil
	}
	clear(h.pending[:n])
	h.pending = h.pending[n:]
	if len(out) == 0 {
		return nil
	}
	h.closing.Add(1)
	return out
}

// closeAll takes every limiter still queued, whether or not requests use
// them (Close), and waits for the closings in flight.
func (h *handover) closeAll() []*gale.Limiter {
	h.mu.Lock()
	var out []*gale.Limiter
	for _, r := range h.pending {
		out = append(out, r.limiters...)
	}
	h.pending = nil
	h.mu.Unlock()
	h.closing.Wait()
	return out
}

func closeLimiters(ctx context.Context, limiters []*gale.Limiter) error {
	var errs []error
	for _, l := range limiters {
		if err := l.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
