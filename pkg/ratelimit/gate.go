package ratelimit

import (
	"context"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// GateChoice is the gate a request goes through and what a rejection says.
type GateChoice struct {
	Name string
	Gate *adaptive.Gate
	// Node is a distributed gate's node, nil for a local gate: a request
	// is admitted by Node.TryAcquire, below the fleet share, and never
	// queues.
	Node       *distributed.Node
	Status     int           // HTTP status of a rejection
	RetryAfter time.Duration // retry-after of a rejection
}

// Held is a request a gate admitted; the zero Held holds nothing.
type Held struct {
	local adaptive.Lease
	fleet distributed.Lease
}

// Release records the request's outcome and frees its slot; only the first
// Release of a Held has an effect.
func (h Held) Release(now time.Time, o adaptive.Outcome) {
	h.local.Release(now, o)
	h.fleet.Release(now, o)
}

// Acquire admits the request at now through the chosen gate: its node's
// share first for a distributed gate (ErrLimit when it is spent), else the
// gate itself, which may queue until ctx ends.
func (c GateChoice) Acquire(ctx context.Context, now time.Time) (Held, error) {
	if c.Node != nil {
		l, ok := c.Node.TryAcquire(now)
		if !ok {
			return Held{}, adaptive.ErrLimit
		}
		return Held{fleet: l}, nil
	}
	l, err := c.Gate.Acquire(ctx, now)
	return Held{local: l}, err
}

// Limit is what a rejection reports as the gate's limit: the local limit,
// or for a distributed gate the ceiling its node admits up to.
func (c GateChoice) Limit(now time.Time) int {
	if c.Node != nil {
		return c.Node.Stats(now).Ceiling
	}
	return c.Gate.Limit()
}
