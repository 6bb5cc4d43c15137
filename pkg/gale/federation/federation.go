// Package federation shares one per-window budget among K regions, admitting
// at most the limit per window whatever K is (Δ = 0): GALE's window-coupled
// leasing lifted one level, with regions for nodes, a region's escrow for a
// node's credits, and a cross-region coordinator (L3) for the store.
//
// Nothing of the leasing protocol is written twice. A region runs the
// ordinary leased gale.Limiter — the pure gale.Machine and its driver — over
// a Region, which is a gale.Store: it takes from the region's shared escrow
// (L2) when there is one, and leases from the Coordinator when that runs
// short. The machine's window coupling is the bound's whole basis: credits
// leased in a window die at its end, on the coordinator's clock less the
// time its reply took — a Grant's WindowEnd − Now counted, by a process,
// from the instant it sent the lease (gale.Machine.Landed) and, by the
// escrow, from the take that preceded the lease (RegionMachine.Split) — so
// no window admits more than the coordinator granted in it, and the
// coordinator grants at most the limit.
//
// A region's decisions are the pure RegionMachine; Region drives it.
// docs/PROOFS.md states the bound, its models (pkg/gale/model's federated
// explorer, regions against the coordinator, and its region explorer, a
// region's processes, escrow and outages) and the state counts.
package federation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Coordinator is the cross-region authority (L3) one key prefix is federated
// through. Implementations MUST be safe for concurrent use by any number of
// regions and processes, MUST make each operation atomic for its key, and
// MUST pass the federationtest conformance suite.
//
// The window-coupled contract, on which the bound rests:
//   - Lease grants units of the window in place at now (on the
//     coordinator's clock, reported in Grant.Now), as gale.Store.Lease does:
//     between min and max, as many as remain up to max — a partial grant is
//     legitimate, other regions having raced the budget down — or none when
//     fewer than min remain. Across all callers, the units granted in one
//     window never exceed the rule's limit less what Reconcile gave back.
//   - Granted units belong to the window named by Grant.WindowEnd and die
//     at its end: the coordinator's count of a window is forgotten when the
//     window ends (a Redis key's PEXPIREAT, a Postgres row's window column),
//     never carried into the next.
//   - Reconcile gives back a region's unused units, once: it is idempotent
//     on (key, windowEnd, token), so a reconcile retried through a
//     partition is applied at most once. Units given back to a window that
//     has ended change nothing (they died with it); a failed reconcile can
//     only lose capacity, never admit more.
//
// Only windowed rules federate (gale.Rule.Windowed): a boundary is what
// grants die at.
//
// A coordinator accepts any key the engine can produce, and gives each its
// own budget and markers: any bytes, and lengths up to about 132 KiB (a
// 256-byte domain, the rule's fingerprint and 16 descriptor entries of a
// 256-byte key and an 8 KiB value, each length-prefixed: pkg/engine's
// key.go and MaxValueBytes), far past what a database index holds
// (PostgreSQL's btree takes about 2.7 kB). A backend that cannot store a
// key whole stores a bounded form of it (a hash) that no other key shares;
// a key is never refused for its length, which would fail a whole rule's
// requests on one client's long value.
type Coordinator interface {
	// Lease takes between min and max units of key's budget under rule at
	// now (the caller's clock; ignored by a coordinator on its own clock).
	Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error)
	// Reconcile gives back rec.Leftover units granted in the window ending
	// at rec.WindowEnd (a Grant's WindowEnd), once per (key, WindowEnd,
	// Token).
	Reconcile(ctx context.Context, key string, rule gale.Rule, rec Reconcile) (Reconciled, error)
	// Healthy returns nil when the coordinator answers.
	Healthy(ctx context.Context) error
}

// Reconcile is one give-back of unused units to a coordinator.
type Reconcile struct {
	// Leftover is how many units go back; ≤ 0 gives back nothing (the
	// marker is still recorded).
	Leftover int64
	// WindowEnd names the window the units were granted in: a Grant's
	// WindowEnd, on the coordinator's clock.
	WindowEnd time.Time
	// Token names this give-back: a retry passes the same token, and the
	// coordinator applies one (key, WindowEnd, Token) at most once. A region
	// that gives back once per window uses its region name.
	Token string
	// Now is the caller's clock (ignored by a coordinator on its own clock).
	Now time.Time
}

// Reconciled is what a Reconcile did.
type Reconciled uint8

const (
	// Applied: the units went back to the window, which had not ended.
	Applied Reconciled = iota + 1
	// Duplicate: this (key, WindowEnd, Token) was reconciled before; nothing
	// changed.
	Duplicate
	// Expired: the window had ended, and the units died with it; the
	// marker is recorded, so a retry reports Duplicate.
	Expired
)

func (r Reconciled) String() string {
	switch r {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("Reconciled(%d)", uint8(r))
}

// ErrRefused is wrapped by a Coordinator's (or an Escrow's) error when the
// server answered and refused this request itself — something about its
// key or its stored state: a PostgreSQL data exception, integrity
// constraint or program limit (SQLSTATE classes 22, 23, 54); a Redis
// WRONGTYPE or CROSSSLOT reply, or an error raised while running the
// operation's script — as opposed to not answering, or refusing every
// request (a connection failure, a timeout, a server shutting down,
// loading, read-only or out of memory, a serialization failure). The error
// wraps the server's error too. A Region does not count such an error as
// an outage: the coordinator is reachable, and only this request failed.
//
// Arguments a backend checks before any I/O (CheckRule, CheckReconcile,
// ErrEscrowArgs, bad min and max) are the caller's bugs: their errors do
// not wrap it, nor does ctx.Err().
var ErrRefused = errors.New("federation: the coordinator refused the request")

// ErrNotWindowed is returned for a rule without windows (GCRA, token
// bucket): only windowed strategies federate.
var ErrNotWindowed = errors.New("federation: only windowed strategies federate (fixed_window, sliding_window, quota); gcra and token_bucket have no boundary for grants to die at")

// ErrToken is returned by Reconcile for an empty token or one longer than
// MaxToken bytes.
var ErrToken = fmt.Errorf("federation: reconcile token must be 1..%d bytes", MaxToken)

// MaxToken is the longest reconcile token, in bytes.
const MaxToken = 256

// CheckReconcile validates a Reconcile's arguments; coordinators call it
// first.
func CheckReconcile(rule gale.Rule, rec Reconcile) error {
	if err := CheckRule(rule); err != nil {
		return err
	}
	if rec.Token == "" || len(rec.Token) > MaxToken {
		return ErrToken
	}
	if rec.WindowEnd.IsZero() {
		return errors.New("federation: reconcile names no window (zero WindowEnd)")
	}
	return gale.CheckReturn(rule, rec.Leftover)
}

// CheckRule returns an error unless rule is valid and windowed.
func CheckRule(rule gale.Rule) error {
	if err := rule.Validate(); err != nil {
		return err
	}
	if !rule.Windowed() {
		return fmt.Errorf("%w (rule %s)", ErrNotWindowed, rule)
	}
	return nil
}
