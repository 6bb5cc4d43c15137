package distributed

import (
	"fmt"
	"time"
)

// DefaultHeartbeat is NodeConfig.Heartbeat's default.
const DefaultHeartbeat = time.Second

// OutagePolicy is what a node admits when it has no live grant to admit
// under: the coordinator call failed, or the lease ran out. The zero value
// is KeepLastShare.
type OutagePolicy struct {
	static int
	useIt  bool
}

// KeepLastShare keeps admitting under the last share until its lease ends,
// and then admits nothing. Before the first grant it admits nothing.
func KeepLastShare() OutagePolicy { return OutagePolicy{} }

// StaticShare admits under a fixed share of n (still capped by L_local)
// from the moment a coordinator call fails or the lease ends, until a call
// succeeds again with a grant to apply; and before the first grant. n is
// the operator's figure for what one node may safely admit alone, e.g. the
// backend's capacity over the largest fleet size; 0 fails closed at once.
func StaticShare(n int) OutagePolicy { return OutagePolicy{static: n, useIt: true} }

func (p OutagePolicy) String() string {
	if p.useIt {
		return fmt.Sprintf("static_share(%d)", p.static)
	}
	return "keep_last_share"
}

// Mode is what a node admits under at an instant.
type Mode uint8

const (
	// ModeWaiting: no grant yet. It admits the static share under
	// StaticShare and nothing under KeepLastShare: a node that has not heard
	// from the coordinator knows of no budget it may use, and Run asks for
	// one at once.
	ModeWaiting Mode = iota
	// ModeGranted: a live grant; it admits while in flight < min(share,
	// L_local).
	ModeGranted
	// ModeHolding: the last call failed; KeepLastShare keeps the share until
	// the lease ends.
	ModeHolding
	// ModeStatic: StaticShare's share, after a failed call or the lease's
	// end (with SelfFence, only until the fence: a fenced node admits
	// nothing).
	ModeStatic
	// ModeLapsed: KeepLastShare after the lease's end, without self-fencing:
	// it admits nothing.
	ModeLapsed
	// ModeFenced: self-fenced, from FenceMargin before the lease's end until
	// a grant is applied: it admits nothing, whatever the outage policy.
	ModeFenced
	// ModeLeft: the node left the fleet (Leave): it admits nothing and
	// beats no more.
	ModeLeft
	// ModeDraining: the node's gate is going out of use (Drain): it admits
	// nothing, and beats on so that its record reserves the requests still
	// in flight, until it leaves.
	ModeDraining
)

func (m Mode) String() string {
	switch m {
	case ModeWaiting:
		return "waiting"
	case ModeGranted:
		return "granted"
	case ModeHolding:
		return "holding"
	case ModeStatic:
		return "static"
	case ModeLapsed:
		return "lapsed"
	case ModeFenced:
		return "fenced"
	case ModeLeft:
		return "left"
	case ModeDraining:
		return "draining"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}
