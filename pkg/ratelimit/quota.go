package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Quota is what an RLQS bucket (a domain and a bucket id's entries) draws
// from in the policy in use: the answer of a QuotaResolver. The zero Quota
// (Kind QuotaNoLimit) is "no limit applies".
type Quota struct {
	Kind QuotaKind
	// Limits are the windowed limits the bucket's requests count against
	// (Kind QuotaLimited): one per limit of the matched descriptor, in
	// policy order. Every unit assigned must be leased from each of them.
	Limits []QuotaLimit
	// Refused says why the matched descriptor cannot be served over RLQS
	// (Kind QuotaRefused), naming the rule. RLS still serves it.
	Refused error
	// UnknownDomain: no policy defines the domain (Kind QuotaNoLimit). The
	// resolver counts each such answer as a request to an unknown domain,
	// so a caller that keeps answers (QuotaGeneration) asks again for
	// these, as it would send RLS each request.
	UnknownDomain bool
}

// QuotaKind is how an RLQS bucket is answered.
type QuotaKind uint8

const (
	// QuotaNoLimit: no limit of the policy applies (an unknown domain,
	// entries no descriptor matches, an unlimited or shadow rule); the
	// bucket is allowed, as RLS answers OK.
	QuotaNoLimit QuotaKind = iota
	// QuotaBlocked: a limit of 0 requests applies; the bucket is denied.
	QuotaBlocked
	// QuotaLimited: Limits apply.
	QuotaLimited
	// QuotaRefused: a limit applies that RLQS cannot serve (Refused says
	// which and why).
	QuotaRefused
)

func (k QuotaKind) String() string {
	switch k {
	case QuotaNoLimit:
		return "no_limit"
	case QuotaBlocked:
		return "blocked"
	case QuotaLimited:
		return "limited"
	case QuotaRefused:
		return "refused"
	}
	return "unknown"
}

// QuotaLimit is one windowed limit an RLQS bucket counts against.
type QuotaLimit struct {
	// Rule names the limit in metrics (its domain and metric name).
	Rule RuleRef
	// Limit is the units the counter admits per window.
	Limit int64
	// Window is the counter's window (unit × unit_multiplier).
	Window time.Duration
	// Key is the counter's key: the same key RLS counts the descriptor
	// in, so RLS and RLQS traffic share one counter and one bound.
	Key string
	// Leaser leases and returns units of Key.
	Leaser QuotaLeaser
}

// QuotaGrant is what one QuotaLeaser.Lease took.
type QuotaGrant struct {
	// Granted is the units taken: between the lease's min and max, or 0.
	Granted int64
	// WindowEnd is the end of the window the units belong to, on the
	// caller's clock (the store's window end moved by the distance between
	// the store's time and the caller's now, as gale's limiter does). The
	// units must all be spent before it.
	WindowEnd time.Time
	// StoreWindowEnd is the same instant on the store's clock: what
	// QuotaLeaser.Return is handed back.
	StoreWindowEnd time.Time
	// StoreNow is the store's time for the lease (the caller's now unless
	// the store reads its own clock): WindowEnd − now = StoreWindowEnd −
	// StoreNow.
	StoreNow time.Time
	// RetryAfter, when nothing was granted, is how long until the
	// counter may have units again.
	RetryAfter time.Duration
}

// QuotaLeaser leases units of a counter and returns them, window-coupled:
// units leased in a window count in that window only, and units returned
// go back to the window they came from (none once it has ended).
// Implementations MUST be safe for concurrent use.
type QuotaLeaser interface {
	// Lease takes between min and max units of key at now (the caller's
	// clock), as many as remain up to max; none when fewer than min remain.
	// A store failure wraps ErrStore.
	Lease(ctx context.Context, key string, min, max int64, now time.Time) (QuotaGrant, error)
	// Return gives units of g back to g's window. Units of a window that
	// has ended are dropped.
	Return(ctx context.Context, key string, units int64, g QuotaGrant, now time.Time) error
}

// QuotaAnnouncer is a QuotaLeaser whose store keeps a demand ledger
// (gale.DemandLedger): Announce records member's demand for key's window
// at now and returns every member's demand the ledger says. Sidecars
// leasing one counter announce before they lease, and ask no more than
// their max-min share (rlqs.MaxMin).
type QuotaAnnouncer interface {
	Announce(ctx context.Context, key, member string, demand int64, now time.Time) ([]QuotaDemand, error)
}

// QuotaDemand is one member's demand in the ledger. Past: its demand in
// the window before, the member not heard in this one yet.
type QuotaDemand struct {
	Member string
	Units  int64
	Past   bool
}

// QuotaResolver maps an RLQS bucket to the limits of the policy in use.
// Implementations MUST be safe for concurrent use.
type QuotaResolver interface {
	// ResolveQuota matches bucket's entries (an unordered map) against
	// domain's descriptor tree. A bucket that cannot be a descriptor (too
	// many entries, a key or value too long, an empty key) is an error
	// wrapping ErrInvalidRequest; everything else is a Quota.
	ResolveQuota(domain string, bucket map[string]string) (Quota, error)
	// QuotaGeneration identifies the policy ResolveQuota answers from: it
	// changes whenever an answer may change (a policy swapped in, the
	// resolver closed). An answer obtained after reading generation g may
	// be kept, and ResolveQuota not called again, while QuotaGeneration
	// returns g (but for an UnknownDomain answer). It must be cheap: the
	// quota server reads it at every bucket usage of every report.
	QuotaGeneration() uint64
}

// MinQuotaWindow is the shortest window RLQS serves: Envoy's assignment
// lives in whole seconds, and each must end before its window does.
const MinQuotaWindow = 2 * time.Second

// ErrQuotaRefused is wrapped by Quota.Refused.
var ErrQuotaRefused = errors.New("rlqs: limit not served over RLQS")
