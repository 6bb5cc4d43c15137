package federation

import (
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// RegionMachine is a region's protocol as a pure state machine, as
// gale.Machine is a node's: what to ask the coordinator for, how a
// coordinator grant is split between the asking process and the regional
// escrow (and how long the escrow's part lives), and how units a process
// gives back are split between the regional budget and the coordinator. It
// has no locks, goroutines, clock or I/O: Region is its driver (store
// calls, retries, shared health), and pkg/gale/model explores it, so the
// region's bound is checked on the code that runs.
//
// Two rules carry the federated bound through a region:
//
//   - The escrow's clock. Units a grant parks in the escrow live until the
//     coordinator's window ends, measured on the escrow's clock from the
//     take that preceded the lease (Held.Now): Since = that take's instant,
//     TTL = WindowEnd − Grant.Now. The take came before the lease was sent,
//     so the balance dies no later than the coordinator's window, however
//     long the coordinator's reply and the refill took. (Measured from the
//     refill instead, the balance outlived the window by the reply's
//     latency, and another process took it in the next window.)
//   - Regional-budget accounting. Units a process leased from its regional
//     budget during an outage (RegionalOnly) go back to that budget, never
//     to the coordinator: the coordinator takes back only units it granted.
//     A process's credits of a window mix both kinds; what it gives back
//     counts as regional first, up to the regional units it took in that
//     window (RegionalHeld), the rest as the coordinator's.
//
// The zero RegionMachine has no escrow, fails closed and has no faults.
type RegionMachine struct {
	// Batch, with an escrow, is the least a lease from the coordinator asks
	// (RegionConfig.Batch).
	Batch int64
	// Escrow says whether the region has a shared escrow (L2).
	Escrow bool
	// Fault makes the machine a deliberately broken one (tests and the
	// model only).
	Fault RegionFault
}

// RegionFault names a deliberate defect of the region machine, each one a
// hole the region once had; the model must find each. The zero value is
// the correct machine.
type RegionFault uint8

const (
	// FaultEscrowTTLFromRefill measures an escrow balance's life from the
	// refill rather than from the take before the lease (issue 28's first
	// hole): it outlives the coordinator's window by the reply's latency.
	FaultEscrowTTLFromRefill RegionFault = 1 << iota
	// FaultRegionalToCoordinator gives every unit a process gives back to
	// the coordinator, regional-budget units included (the second hole):
	// the coordinator then grants units it never counted.
	FaultRegionalToCoordinator
)

// Ask is what a lease of [lo, hi] asks the coordinator for: hi, or with an
// escrow at least Batch, so that the surplus refills the escrow for the
// region's other processes.
func (m *RegionMachine) Ask(lo, hi int64) int64 {
	if !m.Escrow {
		return hi
	}
	return min(gale.MaxLimit, max(hi, m.Batch))
}

// Split divides a coordinator grant g, answering a process lease whose
// most is hi, between the process and the escrow: the grant the process
// lands (at most hi units), and the surplus with the window to refill it
// under. took is the escrow's clock at the take that preceded the lease
// (Held.Now); the surplus lives TTL = WindowEnd − g.Now from it. No surplus
// is 0 and the zero Window; a surplus with the zero Window is of a window
// already over on the coordinator's clock, to be reconciled, not parked.
func (m *RegionMachine) Split(g gale.Grant, hi int64, took time.Time) (gale.Grant, int64, Window) {
	if g.Granted <= hi {
		return g, 0, Window{}
	}
	surplus := g.Granted - hi
	g.Granted = hi
	w := Window{End: g.WindowEnd, TTL: max(0, g.WindowEnd.Sub(g.Now)), Since: took}
	if m.Fault&FaultEscrowTTLFromRefill != 0 {
		w.Since = time.Time{}
	}
	if w.TTL == 0 {
		// The grant's window is over on the coordinator's clock: nothing
		// to park.
		return g, surplus, Window{}
	}
	return g, surplus, w
}

// RegionalHeld is what one process took from its regional budget for one
// key in the window in place (RegionalOnly): the units a give-back of that
// window counts as regional first. The zero value holds none.
type RegionalHeld struct {
	// WindowEnd names the window the units were granted in.
	WindowEnd time.Time
	// Units is how many were granted in it and not yet given back.
	// Invariant: Units ≥ 0; 0 when WindowEnd is zero.
	Units int64
}

// TookRegional records a grant g from the regional budget.
func (m *RegionMachine) TookRegional(h *RegionalHeld, g gale.Grant) {
	if g.Granted <= 0 {
		return
	}
	if !h.WindowEnd.Equal(g.WindowEnd) {
		*h = RegionalHeld{WindowEnd: g.WindowEnd}
	}
	h.Units += g.Granted
}

// SplitReturn divides credits a process gives back, granted in the window
// ending at windowEnd, into the units that go back to the regional budget
// and the rest, which go to the escrow or the coordinator.
func (m *RegionMachine) SplitReturn(h *RegionalHeld, credits int64, windowEnd time.Time) (regional, rest int64) {
	if credits <= 0 {
		return 0, 0
	}
	if m.Fault&FaultRegionalToCoordinator != 0 || h.Units == 0 || !h.WindowEnd.Equal(windowEnd) {
		return 0, credits
	}
	regional = min(credits, h.Units)
	h.Units -= regional
	if h.Units == 0 {
		*h = RegionalHeld{}
	}
	return regional, credits - regional
}

// HealthState is the coordinator connection's health, shared by every rule
// federated through it: an error on one rule's lease is the connection's,
// and a probe's answer heals every rule. The zero value is healthy.
type HealthState struct {
	// DownUntil is when the coordinator may be probed again; zero when it
	// is healthy. On the callers' clock.
	DownUntil time.Time
	// Probing is set while one caller probes: the others are answered down
	// until the probe ends, rather than each probing at once.
	Probing bool
}

// Admission is what HealthState.Admit tells a caller to do.
type Admission uint8

const (
	// Ask the coordinator: it is healthy.
	Ask Admission = iota + 1
	// Probe it (Healthy), then ask: the caller holds the one probe and
	// must end it with Answered or Failed.
	Probe
	// Down: leave it alone, answer by the outage mode.
	Down
)

// Admit says whether a lease at now may ask the coordinator.
func (h *HealthState) Admit(now time.Time) Admission {
	switch {
	case h.DownUntil.IsZero():
		return Ask
	case h.Probing || now.Before(h.DownUntil):
		return Down
	}
	h.Probing = true
	return Probe
}

// Failed records that the coordinator did not answer at now (a lease, or
// the probe), leaving it alone for probeAfter. It reports whether this
// began an outage.
func (h *HealthState) Failed(now time.Time, probeAfter time.Duration) (began bool) {
	began = h.DownUntil.IsZero()
	h.DownUntil, h.Probing = now.Add(probeAfter), false
	return began
}

// Answered records that the coordinator answered. It reports whether this
// ended an outage.
func (h *HealthState) Answered() (ended bool) {
	ended = !h.DownUntil.IsZero()
	*h = HealthState{}
	return ended
}
