package gale

import (
	"context"
	"errors"
	"time"
)

// DemandLedger is a store's record, for one counter, of what each of
// several sidecars would lease of the window in place: the sidecars meet
// there before they lease, so that a window's L can be shared among them by
// their Envoys' demand rather than first come (issue 41, item 9).
//
// Announce records member's demand (its latest replaces the one before) in
// the window of rule's period that now falls in (windows aligned on the
// Unix epoch, on the store's clock where the store keeps its own), and
// returns every member's demand recorded in that window, member's
// included, in no order; and, while the window is younger than
// LedgerEarly(period), the demand in the window before of each member not
// heard in this one yet (Past): a member that announces first in a window
// learns who else leased last window, and may wait for them. A caller whose
// window is older than the one recorded gets its own demand alone, and
// changes nothing. The ledger is advice: it bounds nothing, and a lease
// still takes at most what the counter has left.
type DemandLedger interface {
	Announce(ctx context.Context, key string, rule Rule, member string, demand int64, now time.Time) ([]Demand, error)
}

// Demand is one member's demand in a DemandLedger. Past: its demand in
// the window before, the member not heard in this one yet.
type Demand struct {
	Member string
	Units  int64
	Past   bool
}

// LedgerEarly is how long into a window of period the ledger tells the
// window before's members not heard yet: a tenth of the period, at most
// 500 ms (a lease that waits that long at a window's start still sends
// assignments of the same whole seconds).
func LedgerEarly(period time.Duration) time.Duration {
	return min(period/10, 500*time.Millisecond)
}

// ErrNoLedger is returned by a store wrapper whose store keeps no
// DemandLedger.
var ErrNoLedger = errors.New("gale: the store keeps no demand ledger")

// Announce is s's DemandLedger.Announce, or ErrNoLedger when s keeps none:
// what a store wrapper forwards.
func Announce(ctx context.Context, s Store, key string, rule Rule, member string, demand int64, now time.Time) ([]Demand, error) {
	l, ok := s.(DemandLedger)
	if !ok {
		return nil, ErrNoLedger
	}
	return l.Announce(ctx, key, rule, member, demand, now)
}

// MaxMember is the longest member name Announce takes.
const MaxMember = 64

// CheckAnnounce reports whether Announce's arguments are valid: a member
// name of 1..MaxMember bytes, a demand of 0..MaxLimit, a period of 1 ms
// or more.
func CheckAnnounce(rule Rule, member string, demand int64) error {
	switch {
	case member == "" || len(member) > MaxMember:
		return errors.New("gale: a ledger member name must be 1 to 64 bytes")
	case demand < 0 || demand > MaxLimit:
		return errors.New("gale: a ledger demand must be 0 to MaxLimit")
	case rule.Period < time.Millisecond:
		return errors.New("gale: a ledger needs a rule with a period of a millisecond or more")
	}
	return nil
}
