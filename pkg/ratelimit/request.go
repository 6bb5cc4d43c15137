package ratelimit

import (
	"errors"
	"time"
)

// Request is one rate-limit question: the protocol-free form of Envoy's
// RateLimitRequest.
type Request struct {
	Domain      string
	Descriptors []Descriptor
	// HitsAddend is what each descriptor adds to its limits unless it says
	// otherwise; 0 means 1.
	HitsAddend uint32
	// Trace, when not nil, is filled with what the decision did (for a
	// tracing span); nil costs nothing.
	Trace *Trace
}

// Trace is what DecideInto did for one request: every limit it asked, in
// order. DecideInto resets it first. A caller may reuse one Trace across
// requests.
type Trace struct {
	Limits []TracedLimit
	// StoreTrips is the store round trips the request waited for, summed
	// over its limits: 0 when every limit was decided locally.
	StoreTrips int
}

// TracedLimit is one limit applied to one request descriptor.
type TracedLimit struct {
	Descriptor int     // the descriptor's index in the request
	Rule       RuleRef // the rule's domain and metric name
	Mode       Mode
	Algorithm  Algorithm // "" for unlimited and blocked (requests_per_unit 0) rules
	Code       Code      // this limit's verdict (OVER_LIMIT in shadow mode too)
	Shadow     bool
	// StoreTrips is the round trips this limit's check waited for (a
	// negative hit's give-back counts one unless leased).
	StoreTrips int
	// Fallback: the store failed and on_store_error answered.
	Fallback bool
	// Refunded: the request was denied, so what this limit took went back.
	Refunded bool
}

// RuleRef names a rule in metrics: its domain and its limit's name (or, when
// unnamed, its descriptor path as envoyproxy/ratelimit writes it, e.g.
// "remote_address" or "path_/api/*.user").
type RuleRef struct {
	Domain string
	Name   string
}

// Descriptor is one list of entries to limit on.
type Descriptor struct {
	Entries []Entry
	// HitsAddend, when non-nil, makes the descriptor a charge, as
	// envoyproxy/ratelimit reads a descriptor's hits_addend (Envoy sets it
	// for cost-based limits: 0 on the request, the cost when the stream is
	// done):
	//   - *HitsAddend == 0 checks without counting: OK while the count
	//     stands at or below the limit (at the limit exactly too, with 0
	//     remaining), OVER_LIMIT once a charge has left it past the limit.
	//   - *HitsAddend == N > 0 is counted in full, even when it overruns
	//     the limit (OVER_LIMIT is answered then, but the N are counted, so
	//     later checks are refused until the window lets them through), and
	//     even when another descriptor of the request is OVER_LIMIT: a
	//     charge is never refunded.
	// nil leaves the descriptor to the request's HitsAddend (0 meaning 1),
	// taken whole or not at all: a denied request consumes nothing. With
	// Negative, *HitsAddend is what is given back (0: nothing).
	//
	// Fair rules (fairness:) cannot stand past their limit: they take a
	// charge as a check of max(N, 1), whole or not at all. Federated rules
	// count what the coordinator can still grant of a charge and drop the
	// rest, and answer a check-only descriptor OVER_LIMIT once their budget
	// is spent, at the limit exactly too.
	HitsAddend *uint64
	// Override, when non-nil, is a limit the request itself sets (Envoy's
	// descriptor limit override): a fixed window, strict, keyed by the
	// entries.
	Override *Override
	// Negative gives the hits back instead of taking them
	// (is_negative_hits).
	Negative bool
}

// Entry is one key and value of a descriptor.
type Entry struct{ Key, Value string }

// Override is a limit carried by the request.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Bounds on a request; beyond them it is rejected with ErrInvalidRequest.
// A domain is a name an operator writes in a policy file, like an entry's
// key, so it has the key's bound. Envoy's protos set no maximum on either.
const (
	MaxDomainBytes = 256
	MaxDescriptors = 64
	MaxEntries     = 16
	MaxKeyBytes    = 256
	MaxValueBytes  = 8192
)

// MaxUnits is the most units a limit, a hit or a cost may count: 2^40
// (the limiters' bound, gale.MaxLimit).
const MaxUnits = 1 << 40

// ErrInvalidRequest is wrapped by every error Decide returns for a request
// that cannot be answered as sent (no domain, no descriptors, an empty key,
// a domain, key or value too long, too many descriptors or entries, hits
// that overflow). The adapter maps it to INVALID_ARGUMENT.
var ErrInvalidRequest = errors.New("invalid rate-limit request")

// ErrStore is wrapped by every error a decision returns because a store
// failed and the rule's on_store_error is "error" (gale.ErrStore is this
// error). The adapter maps it to UNAVAILABLE.
var ErrStore = errors.New("gale: store failed")

// Code is a rate-limit verdict, numbered as Envoy's RateLimitResponse.Code.
type Code uint8

// The verdicts.
const (
	CodeUnknown   Code = 0
	CodeOK        Code = 1
	CodeOverLimit Code = 2
)

func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// Status is the verdict of one request descriptor.
type Status struct {
	Code Code
	// Limit is the limit that decided; nil when no limit applied.
	Limit *LimitInfo
	// Remaining is what that limit could still admit (MaxUint32 for an
	// unlimited rule).
	Remaining uint32
	// UntilReset is, for an OVER_LIMIT status, the time until the same
	// request would fit, when nothing else is taken meanwhile (a limit of 0:
	// the end of its unit's window); otherwise the time until that limit is
	// fully available again.
	UntilReset time.Duration
}

// LimitInfo is the limit a status reports (RateLimitResponse.RateLimit).
type LimitInfo struct {
	Name            string
	Unit            Unit
	RequestsPerUnit uint32
	UnitMultiplier  uint32
}

// Response is the answer to a Request.
type Response struct {
	// Code is OVER_LIMIT iff some limit that is neither shadow nor quota
	// mode is over, or every quota-mode descriptor of the request is over.
	Code Code
	// Statuses has one entry per request descriptor, in order.
	Statuses []Status
	// HeaderStatus is the index of the status closest to its limit (an
	// over-limit one first, the one that fits latest, then the least
	// remaining), for the RateLimit-* response headers; -1 when no counted
	// limit applied (none, or only unlimited ones).
	HeaderStatus int
	// QuotaMode is true when a quota-mode limit applied; QuotaViolations
	// lists the descriptors over a quota-mode limit.
	QuotaMode       bool
	QuotaViolations []int
}
