// Package fair splits one rate budget among tenants in weighted max-min fair
// proportion: the weighted-fair escrow of the two-tier engine.
//
// An Escrow holds Limit units per fixed window of Window (windows are
// [k·Window, (k+1)·Window) of Unix time, as gale.FixedWindow counts them).
// A tenant's demand seen is the units it has asked for in the window,
// admitted or not, or what it asked for in the previous window when that was
// more: the previous window is the forecast that lets a steady tenant keep
// its share before it has asked for all of it again. Each call is decided
// hierarchically:
//
//  1. Cap. A call that would take the window's admissions past Limit is
//     denied, whatever fairness says (ReasonCap).
//  2. Share. A call that keeps its tenant within its guaranteed share,
//     g = weight/W · Limit, is admitted (ReasonShare). W is the sum of the
//     configured weights plus DefaultWeight for each unconfigured tenant seen
//     in this window or the last, so a guarantee does not depend on the order
//     in which tenants arrive.
//  3. Borrow. A call beyond the guarantee is admitted (ReasonBorrow) when it
//     takes no budget the other tenants have claimed — the part of their
//     guarantee within their demand seen that they have not been admitted —
//     and keeps its tenant within its weighted max-min fair share of Limit
//     given the demands seen (WaterFill). It borrows only its own cost, never
//     a reservation of the slack: like a Deficit Round Robin quantum, one call
//     cannot take all of it. Past its share rounded down it may borrow
//     up to the share rounded up (or one call, whatever its cost, when it
//     has had nothing in the window) while what is left still covers the
//     other tenants' shares rounded down: the rounding's remainder goes to
//     whoever asks first. Otherwise it is denied (ReasonDenied).
//
// Why this is work-conserving: a tenant claims no more than its demand seen,
// so the share of an idle tenant — one that asked for nothing in this window
// or the last — is lent in full to the backlogged ones, and a tenant that
// falls idle releases its claim after one window. Among borrowers the
// water-filling shares sum to min(Σ demand seen, Limit), so a call below the
// cap is refused only when the rest of the budget is owed to demand other
// tenants have shown. Under steady demand, from the second window on, each
// tenant calling for one unit at a time is admitted its WaterFill
// allocation of Limit rounded down or up, and the window admits
// min(Σ demand, Limit): shares under one unit (more tenants than units)
// are not all rounded to nothing.
//
// What it does not do: it is not preemptive (units admitted before a tenant
// first asks stay admitted, so a newcomer can find a window's budget spent),
// and it is not strategy-proof (per FairRide, nothing work-conserving and
// sharing-incentive is): a tenant inflating its demand gains at most up to
// its fair share, and the forecast carries the inflation one window only.
//
// Memory is bounded by Config.MaxTenants: the tenants not in Weights past it
// are decided together on one overflow account that weighs DefaultWeight, so
// a newcomer is still admitted while the budget has room, and the cap and
// the configured tenants' guarantees hold as ever.
//
// Shared runs the same decisions in each process of a fleet over budget
// leased in quanta from a gale.Store fixed-window counter, so the fleet's
// admissions per window stay at or below Limit for any number of processes.
//
// Federated runs the decisions over tenants that call from several regions,
// with each tenant-region pair's share from Allocate: a cross-region layer
// over the regions, each weighted by its active aggregate tenant weight,
// composed with the in-region WaterFill, after splitting each tenant's weight
// among its regions by its demand there. Each tenant's total over its regions
// is then its flat weighted max-min fair share of Limit. Federated is one
// arbiter in one process; distributing it needs a store that carries the
// regions' demands and admissions, which this package does not have yet.
package fair
