package federation

import "sync/atomic"

// Stats is a snapshot of a Region's counters since it was made.
type Stats struct {
	// Leases is the leases the coordinator answered; Denied and Partial
	// count those that granted nothing and less than asked; Leased is the
	// units granted; LeaseErrors the leases it did not answer.
	Leases, Denied, Partial, Leased, LeaseErrors int64
	// EscrowTaken is the units processes took from the escrow, Refilled the
	// units put into it, Released the dead balances' units captured.
	// RefillUnknown is the units of refills that failed and may have landed
	// (a reply lost or late): never given back to the coordinator, they are
	// in the escrow or lost to their window.
	EscrowTaken, Refilled, Released, RefillUnknown int64
	// Balance is the escrow balance the last take left (of the key it
	// took from).
	Balance int64
	// Reconciles by what the coordinator did, and those that failed (each
	// attempt) or were dropped unsent (too many waiting).
	ReconcileApplied, ReconcileDuplicate, ReconcileExpired, ReconcileFailed, ReconcileLost int64
	// Regional is the units granted from the regional budget during
	// outages (RegionalOnly).
	Regional int64
	// Outages counts the times the coordinator became unreachable; Down
	// reports whether it is now.
	Outages int64
	Down    bool
}

// Counters are a Region's counters. Regions made one after another for
// one rule (a policy reload) may share one Counters, so that what they
// count never goes back; the zero value is ready. Safe for concurrent use.
type Counters struct {
	leases, denied, partial, leased, leaseErrors                                           atomic.Int64
	escrowTaken, refilled, released, refillUnknown, balance                                atomic.Int64
	reconcileApplied, reconcileDuplicate, reconcileExpired, reconcileFailed, reconcileLost atomic.Int64
	regional, outages                                                                      atomic.Int64
}

// Stats returns a snapshot of the region's counters (shared ones included).
func (r *Region) Stats() Stats {
	s := r.stats.Snapshot()
	s.Down = r.Down()
	return s
}

// Snapshot returns the counters' values; Down is false (a Region knows it).
func (c *Counters) Snapshot() Stats {
	return Stats{
		Leases: c.leases.Load(), Denied: c.denied.Load(), Partial: c.partial.Load(), Leased: c.leased.Load(), LeaseErrors: c.leaseErrors.Load(),
		EscrowTaken: c.escrowTaken.Load(), Refilled: c.refilled.Load(), Released: c.released.Load(), RefillUnknown: c.refillUnknown.Load(),
		Balance:          c.balance.Load(),
		ReconcileApplied: c.reconcileApplied.Load(), ReconcileDuplicate: c.reconcileDuplicate.Load(), ReconcileExpired: c.reconcileExpired.Load(),
		ReconcileFailed: c.reconcileFailed.Load(), ReconcileLost: c.reconcileLost.Load(),
		Regional: c.regional.Load(), Outages: c.outages.Load(),
	}
}
