// Package policy reads throttlekit's rate-limit policy: a directory of YAML
// files, one domain per file, in envoyproxy/ratelimit's format (every file it
// accepts loads here and means the same) plus throttlekit's extensions. A
// loaded Set is validated and immutable; every error names the file, the line
// and the field (a YAML syntax error also quotes the line, with a caret under
// the problem). A set with no file is refused (ErrEmpty). Format writes a
// domain back in the policy's own YAML.
package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// Set is every domain of one policy directory, validated. It is immutable
// once returned by Load: the engine compiles it and swaps it in whole.
type Set struct {
	// Dir is the directory the set was read from.
	Dir string
	// Domains are sorted by name; names are unique. A file that only
	// defines gates adds no domain.
	Domains []*Domain
	// Gates are every file's concurrency gates, by file name then file
	// order: a request takes the first gate that matches. Names are unique.
	Gates []*Gate
	// Files are every file as read, by file name, including those that only
	// define gates (whose Name is empty). Never empty.
	Files []*Domain
	// Hash identifies the contents: the SHA-256 (hex) of every file's name
	// and bytes, in name order. Two loads of the same files give one hash.
	Hash string
}

// Domain is one file: a domain name and its descriptor tree.
type Domain struct {
	// Name is the domain; empty for a file that only defines gates.
	Name        string
	File        string // path of the file it came from
	Descriptors []*Descriptor
	// Gates are the file's concurrency gates, in file order.
	Gates []*Gate
	// Costs are the file's cost limits (reserve, then settle, on
	// ext_proc), in file order; only in a file with a domain.
	Costs []*CostLimit
}

// Descriptor is one node of a domain's tree, as envoyproxy/ratelimit defines
// it, with throttlekit's extensions.
type Descriptor struct {
	// Key must match the request entry's key. Never empty.
	Key string
	// Value, when set, must match the entry's value; '*' in it matches any
	// run of bytes (anywhere in the value). Empty means any value, each value
	// getting its own limit.
	Value string
	// Limits are the rule's limits: rate_limit and the rate_limits list, in
	// that order. Empty for a placeholder node (or a whitelisted key).
	Limits []*Limit
	// Descriptors are the nested nodes.
	Descriptors []*Descriptor

	ShadowMode     bool // whatever the limits say, the answer is OK (counted as shadow)
	QuotaMode      bool // over limit is reported, not enforced, unless every quota descriptor of the request is over
	DetailedMetric bool // metrics carry the request's value for this key (bounded)
	ValueToMetric  bool // metrics carry the request's value for this key (bounded)
	ShareThreshold bool // every value matching a wildcard Value shares one counter

	// Mode is how the limits are enforced (extension; default strict).
	Mode Mode
	// Lease tunes leased mode (extension).
	Lease Lease
	// Federation tunes federated mode (extension); set exactly when Mode
	// is Federated.
	Federation *Federation
	// OnStoreError says what to answer when the store fails (extension;
	// default error: the gRPC error lets Envoy's failure_mode_deny decide).
	OnStoreError StoreErrorPolicy
	// Fairness, when set, shares the descriptor's one limit among tenants in
	// weighted max-min fair proportion (extension).
	Fairness *Fairness

	Pos Pos // where the descriptor's `key` is
}

// HasWildcard reports whether Value contains a '*'.
func (d *Descriptor) HasWildcard() bool { return strings.Contains(d.Value, "*") }

// Limit is one rate limit of a descriptor.
type Limit struct {
	// Name identifies the limit for `replaces` and in metrics and responses;
	// optional. It is a label: the limit's counter does not depend on it
	// (checkCounters).
	Name string
	// Unlimited limits are never counted and always OK; they carry no unit.
	Unlimited bool
	// Unit and RequestsPerUnit: RequestsPerUnit per UnitMultiplier·Unit. A
	// RequestsPerUnit of 0 denies every request (envoyproxy's block list).
	Unit            Unit
	RequestsPerUnit uint32
	// UnitMultiplier stretches the unit (30 × second); at least 1 (extension).
	UnitMultiplier uint32
	// Algorithm is the strategy (extension; default fixed_window).
	Algorithm Algorithm
	// Burst is the bucket size of gcra and token_bucket; 0 means
	// RequestsPerUnit (extension).
	Burst uint32
	// Replaces names limits this one replaces when both apply to a request.
	Replaces []string

	Pos Pos // where the limit's block starts
	// Field is the limit's YAML path, for errors found after parsing, e.g.
	// descriptors[1].rate_limit or descriptors[0].rate_limits[2].
	Field string
}

// Period is the limit's window: UnitMultiplier × Unit, with envoyproxy's
// unit lengths (a month is 30 days, a year 365). A quota's windows are
// calendar periods instead; Period is then their nominal length.
func (l *Limit) Period() time.Duration {
	m := l.UnitMultiplier
	if m == 0 {
		m = 1
	}
	return time.Duration(m) * l.Unit.Duration()
}

// Unit is a rate-limit unit, as envoyproxy/ratelimit names them
// (ratelimit.Unit, which the engine's requests and answers carry too).
type Unit = ratelimit.Unit

// The units. Their lengths are envoyproxy/ratelimit's: windows of that many
// seconds aligned on Unix time.
const (
	Second = ratelimit.Second
	Minute = ratelimit.Minute
	Hour   = ratelimit.Hour
	Day    = ratelimit.Day
	Week   = ratelimit.Week  // 7 days
	Month  = ratelimit.Month // 30 days
	Year   = ratelimit.Year  // 365 days
)

// Units lists the valid units in increasing length.
var Units = []Unit{Second, Minute, Hour, Day, Week, Month, Year}

// Algorithm names a strategy (gale's names; ratelimit.Algorithm).
type Algorithm = ratelimit.Algorithm

// The algorithms a limit may use.
const (
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
	GCRA          Algorithm = "gcra"
	TokenBucket   Algorithm = "token_bucket"
	// Quota counts per UTC calendar period, by unit: day, week (ISO, from
	// Monday), month or year — a month is the calendar's, not 30 days.
	// It takes no unit_multiplier.
	Quota Algorithm = "quota"
)

// Mode is how a descriptor's limits are enforced (ratelimit.Mode).
type Mode = ratelimit.Mode

// The modes (gale's names).
const (
	Strict     Mode = "strict"
	CachedDeny Mode = "cached_deny"
	Leased     Mode = "leased"
	// Federated shares the limits with every region through the
	// cross-region coordinator (package gale/federation).
	Federated Mode = "federated"
)

// Lease tunes leased mode.
type Lease struct {
	// Batch is the credits per lease; 0 means the engine's default.
	Batch uint32
	// Auto learns each key's batch online (batch: auto): EOQ sizing, trading
	// store round trips (OrderCost) against credits stranded at window ends
	// (StrandPenalty); 0 costs mean 1.
	Auto                     bool
	OrderCost, StrandPenalty float64
	// WindowCoupled expires credits with the window that granted them.
	// Default true.
	WindowCoupled bool
	// LowWater, when > 0, refills in the background at this many credits.
	LowWater uint32
	// ReturnIdleAfter, when > 0, returns credits unused for this long.
	ReturnIdleAfter time.Duration
}

// StoreErrorPolicy is what a descriptor answers when the store fails.
type StoreErrorPolicy string

// The policies.
const (
	OnErrorError StoreErrorPolicy = "error"
	OnErrorAllow StoreErrorPolicy = "allow"
	OnErrorDeny  StoreErrorPolicy = "deny"
)

// Pos is a place in a policy file. Line and Column count from 1; 0 means
// unknown.
type Pos struct {
	File   string
	Line   int
	Column int
}

// String is "file:line", or "file" when the line is unknown.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// Error is one problem in a policy file. Its text is
// "file:line: field: message", where field is the YAML path (e.g.
// descriptors[2].rate_limit.unit or concurrency[0].queue.timeout).
type Error struct {
	Pos   Pos
	Field string
	Msg   string
	// Snippet, when set, quotes the line of the problem with a caret under
	// Pos.Column, on two lines ("  6 | <line>" and "    |   ^"). Syntax
	// errors carry one.
	Snippet string
}

// Error is the text "file:line: field: message" ("file:line: message"
// when the problem is not in one field), then the snippet on lines of its
// own when there is one.
func (e *Error) Error() string {
	s := fmt.Sprintf("%v: %s: %s", e.Pos, e.Field, e.Msg)
	if e.Field == "" {
		s = fmt.Sprintf("%v: %s", e.Pos, e.Msg)
	}
	if e.Snippet != "" {
		s += "\n" + e.Snippet
	}
	return s
}

// Errors is every problem found while loading; Load reports them all at once.
type Errors []*Error

// Error is the errors' texts, one a line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Gate is one adaptive concurrency gate: the concurrency section of a policy
// file. Requests (Envoy ext_proc) that match it are admitted only while the
// gate's inferred limit allows. Gate names are unique across a policy set.
type Gate struct {
	Name  string
	Match GateMatch
	// Controller infers the limit: gradient2 (default), aimd, p95 or vegas.
	Controller string
	// MinLimit, MaxLimit, InitialLimit bound the limit; 0 means the engine's
	// defaults.
	MinLimit, MaxLimit, InitialLimit int
	// Params are the controller's own parameters by name (e.g. tolerance,
	// target_p95), checked by the engine, which knows each controller.
	Params map[string]Param
	Queue  GateQueue
	Reject GateReject
	// Distributed, when set, shares one inferred ceiling among the fleet's
	// sidecars through a coordinator.
	Distributed *Distributed
	Pos         Pos // where the gate's name is
	// Field is the gate's YAML path, for errors found after parsing, e.g.
	// concurrency[2].
	Field string
}

// GateMatch selects the requests of a gate; every field given must match,
// and at least one is given.
type GateMatch struct {
	// Authority is the :authority (Host) to match; '*' matches any run.
	Authority string
	// PathPrefix is a prefix of :path.
	PathPrefix string
	// Header, when set, must be present with this exact value (an empty
	// Value matches any value).
	Header *HeaderMatch
}

// HeaderMatch is a request header a gate matches on.
type HeaderMatch struct{ Name, Value string }

// Param is one controller parameter as written, with where it was written.
type Param struct {
	Value string
	Pos   Pos
}

// GateQueue is a gate's bounded waiting room.
type GateQueue struct {
	// Max is how many requests may wait; 0 rejects at once at the limit.
	Max int
	// Timeout is how long one may wait; it must stay under Envoy's ext_proc
	// message_timeout (the engine checks).
	Timeout time.Duration
	// LIFO serves the newest waiter first (default FIFO).
	LIFO bool
}

// GateReject is the response a rejected request gets.
type GateReject struct {
	// Status is the HTTP status (default 503).
	Status int
	// RetryAfter is sent as the retry-after header (default 1s).
	RetryAfter time.Duration
}

// Fairness shares one limit among the tenants a request entry names: each
// gets a weighted max-min fair share of the window's budget, and an idle
// tenant's share goes to the busy ones.
type Fairness struct {
	// TenantKey is the key of the request entry whose value is the tenant;
	// it must be the key of this descriptor or of one above it.
	TenantKey string
	// Weights are the tenants' weights; DefaultWeight (default 1) is every
	// other tenant's.
	Weights       map[string]float64
	DefaultWeight float64
	// MaxTenants bounds the tenants not in Weights that each counter of the
	// rule tracks by name in a window (max_tenants: 1..MaxFairTenants,
	// default DefaultFairTenants). A new tenant past it is not denied: it
	// shares one overflow account, of DefaultWeight, with every other
	// tenant past it (pkg/gale/fair, Config.MaxTenants).
	MaxTenants int
	Pos        Pos
}

// The bounds of fairness.max_tenants. A tracked tenant costs about 110
// bytes plus its name per counter, and a call beyond its tenant's guarantee
// scans and sorts the tracked tenants under the counter's lock (roughly
// 10µs at 1,000 tenants, 130µs at 10,000), so the default is ten times the
// hundred tenants the bound used to be, and a bound past MaxFairTenants is
// refused.
const (
	DefaultFairTenants = 1000
	MaxFairTenants     = 100_000
)
