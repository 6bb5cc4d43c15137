package gale

import "time"

// Decision is the answer to one check. The zero value denies with no limit
// information.
type Decision struct {
	// Allowed reports whether the units were admitted.
	Allowed bool
	// Limit is the rule's Limit.
	Limit int64
	// Remaining is how many more units could be admitted now, after this
	// decision, at most the rule's Capacity. In leased mode it is this
	// node's view: what the fleet had left at the key's last store answer
	// (the store's remaining then plus this node's credits) less what the
	// node has admitted since — true as of that answer, blind to what
	// other nodes took since. It never rises between two answers of one
	// node within a window (a refund or another node's give-back does not
	// raise it); for GCRA and the token bucket, whose store refills with
	// time, it is non-increasing between two store answers. A client whose
	// requests spread over several nodes sees each node's view in turn,
	// which need not be monotonic.
	Remaining int64
	// ResetAt is when the limit is fully available again, when nothing else
	// is taken meanwhile: the window's end for the fixed windows and quotas,
	// the end of the next window for a sliding window that counts units in
	// its current one (the previous window's end when only that one
	// counts), the moment the bucket is full for the others. In leased mode
	// it is the store's, as of the last lease.
	ResetAt time.Time
	// RetryAfter is how long until a check of the same cost could be admitted,
	// when nothing else changes; 0 when Allowed. For a cost above the rule's
	// capacity (never admissible) it is the time until ResetAt.
	RetryAfter time.Duration
	// Fallback is true when the store failed and the decision came from the
	// limiter's OnStoreError policy rather than from the store.
	Fallback bool
	// Trips is how many store round trips the check waited for: 0 when L1
	// decided alone (a leased local hit, a cached denial), 1 for a strict
	// check, and for a leased check one per lease or return it waited on
	// (its own or another check's on the same key). For tracing.
	Trips uint8
	// Overrun is, for a charge (Limiter.Charge, Store.Charge), the units it
	// counted past the limit: 0 when it fit, and for every check.
	Overrun int64
	// WindowEnd names the store window the admitted units were counted in:
	// its end, on the store's clock (as a Grant's WindowEnd). Refund gives
	// the units back to that window and to no other. The zero time for a
	// denial, a fallback, and the strategies without windows. A charge's
	// names the window its units were counted in, allowed or not.
	WindowEnd time.Time
}

// Grant is the store's answer to a lease.
type Grant struct {
	// Granted is the number of credits leased: between the request's min and
	// max, or 0 when fewer than min remained (then Decision is the denial).
	Granted int64
	// WindowEnd is the end of the store window the credits belong to, in the
	// store's time; the zero time for strategies without windows.
	WindowEnd time.Time
	// Now is the store's time for this operation: the request's now, or the
	// server's clock when the store reads its own time. WindowEnd − Now is how
	// long the credits live.
	Now time.Time
	// Decision is the store's view after the lease (Remaining, ResetAt), or
	// the denial when Granted is 0.
	Decision Decision
}
