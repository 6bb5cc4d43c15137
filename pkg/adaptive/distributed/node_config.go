package distributed

import (
	"errors"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// NodeConfig configures a Node. Node, Gate and Coordinator are required;
// the zero values of the other fields give a node beating every second on
// the real clock, with a lease of two beats, no eager beats, no
// self-fencing and KeepLastShare.
type NodeConfig struct {
	// Node is the node's identity, unique in its fleet (a pod name). Two
	// live processes with one Node corrupt the aggregate; the coordinator
	// refuses the second (ErrDuplicateNode).
	Node string
	// Gate names the gate at the coordinator: the nodes that share it split
	// one global ceiling.
	Gate        string
	Coordinator Coordinator
	// Fleet is what every node of the gate agrees on. Its LeaseTTL 0 means
	// 2 × Heartbeat, so one slow beat does not drop a healthy node.
	Fleet Config
	// Heartbeat is Run's interval between regular beats. 0 means
	// DefaultHeartbeat.
	Heartbeat time.Duration
	// EagerDebounce turns on eager beats: Run makes an off-cycle beat, at
	// most one per EagerDebounce, when the node is refused by a share below
	// its fair part of L_global (⌊Global/Live⌋) while L_local has room, when
	// in flight drains down to a share a grant lowered, or when an applied
	// grant changed the share (the first grant excepted; Beat bumps the
	// generation on every beat, so a new generation alone is no news).
	// Triggers never block admission: they fill a one-slot channel that Run
	// drains. 0: regular beats only.
	EagerDebounce time.Duration
	// SelfFence turns on self-fencing: from FenceMargin before the lease's
	// end (on the node's clock) the node admits nothing until a grant is
	// applied. FenceMargin must exceed the clocks' offset plus their drift
	// over a lease (and, for work that cannot be cancelled, the longest
	// request), so the node stops before the coordinator hands its budget
	// on. Requires FenceMargin < LeaseTTL − Heartbeat.
	SelfFence   bool
	FenceMargin time.Duration
	// OnFenced, if set, is called once per fencing episode, when an
	// admission or Run first finds the node fenced, never with the node's
	// lock held; the app may abort work that cannot be cancelled. Requires
	// SelfFence.
	OnFenced func()
	// OnDuplicate, if set, is called with the error of each heartbeat the
	// coordinator refused with ErrDuplicateNode. A restarted process sees it
	// until its previous incarnation's record expires (≤ LeaseTTL); a node
	// that replaces another in the same process does not, if it takes the
	// other over (TakeOver).
	OnDuplicate func(error)
	// Outage is what the node admits without a live grant.
	Outage OutagePolicy
	// Clock times Run. nil means the real clock.
	Clock clock.Clock
}

func (c NodeConfig) validate(gate *adaptive.Gate) error {
	if c.Node == "" {
		return errors.New("distributed: node: Node is empty: every node needs an identity unique in its fleet (e.g. the pod name)")
	}
	pre := fmt.Sprintf("distributed: node %q: ", c.Node)
	ttl := c.Fleet.LeaseTTL
	switch {
	case gate == nil:
		return errors.New(pre + "gate is nil")
	case c.Gate == "":
		return errors.New(pre + "Gate is empty: name the gate the fleet shares")
	case c.Coordinator == nil:
		return errors.New(pre + "Coordinator is nil")
	case c.Heartbeat < 0:
		return fmt.Errorf("%sHeartbeat %v is negative (0 means %v)", pre, c.Heartbeat, DefaultHeartbeat)
	case ttl < 0:
		return fmt.Errorf("%sLeaseTTL %v is negative (0 means 2 × Heartbeat)", pre, ttl)
	case c.Heartbeat >= ttl:
		return fmt.Errorf("%sHeartbeat %v ≥ LeaseTTL %v: the lease would end before the next beat renews it; lower Heartbeat or leave LeaseTTL 0 (2 × Heartbeat)", pre, c.Heartbeat, ttl)
	case c.EagerDebounce < 0:
		return fmt.Errorf("%sEagerDebounce %v is negative (0 means no eager beats)", pre, c.EagerDebounce)
	case c.FenceMargin < 0:
		return fmt.Errorf("%sFenceMargin %v is negative", pre, c.FenceMargin)
	case !c.SelfFence && c.FenceMargin != 0:
		return fmt.Errorf("%sFenceMargin %v without SelfFence: set SelfFence or drop the margin", pre, c.FenceMargin)
	case !c.SelfFence && c.OnFenced != nil:
		return errors.New(pre + "OnFenced without SelfFence: it would never be called")
	case c.SelfFence && c.FenceMargin >= ttl:
		return fmt.Errorf("%sFenceMargin %v ≥ LeaseTTL %v: every grant would arrive fenced", pre, c.FenceMargin, ttl)
	case c.SelfFence && c.FenceMargin >= ttl-c.Heartbeat:
		return fmt.Errorf("%sFenceMargin %v ≥ LeaseTTL %v − Heartbeat %v: a healthy node would fence before its next beat renews the lease", pre, c.FenceMargin, ttl, c.Heartbeat)
	case c.Outage.useIt && c.Outage.static < 0:
		return fmt.Errorf("%sStaticShare(%d) is negative", pre, c.Outage.static)
	}
	if err := c.Fleet.Validate(); err != nil {
		return fmt.Errorf("%s%w", pre, err)
	}
	return nil
}
