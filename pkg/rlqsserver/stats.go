package rlqsserver

import (
	"sync"

	"github.com/throttlekit/throttlekit/pkg/ratelimit"
)

// RuleStats counts, since the server started, what the server did for the
// buckets of one rule (a windowed limit of the policy).
type RuleStats struct {
	Rule ratelimit.RuleRef
	// Assignments is the TokenBucket assignments sent, Units the sum of
	// their max_tokens.
	Assignments, Units int64
	// TopUps is the assignments among them that topped up an Envoy which
	// had spent its share of the window (rlqs.Assignment.Fresh).
	TopUps int64
	// Expiries is the assignments whose time to live ended while their
	// stream was still subscribed (each ends before its window does).
	Expiries int64
	// Abandons is the AbandonActions sent (idle buckets).
	Abandons int64
	// Allowed and Denied are the requests Envoys reported.
	Allowed, Denied int64
	// Leases is the store leases answered (granted or not; failures are
	// not counted); Leased is the units they granted, Returned the units
	// given back.
	Leases, Leased, Returned int64
}

// Stats is a snapshot of the server's counters.
type Stats struct {
	// Rules is one entry per rule served so far, in no order.
	Rules []RuleStats
	// StreamsOpen is the streams open now.
	StreamsOpen int64
	// Blanket counts the blanket actions sent, by "allow_all" or
	// "deny_all" and reason (no_limit, blocked, refused).
	Blanket map[BlanketReason]int64
	// Skipped counts bucket usages not served, by reason (bucket_id,
	// entries, elapsed, counts, streams, report, buckets) and BadReports whole messages
	// refused.
	Skipped    map[string]int64
	BadReports int64
	// StoreCalls is the store leases and returns in flight now.
	StoreCalls int64
	// Abandons is the AbandonActions sent, for every kind of bucket.
	Abandons int64
	// RefusedStreams is the streams refused past MaxStreamsPerConn.
	RefusedStreams int64
	// Superseded is the actions replaced, before they were sent, by a
	// newer one for the same bucket and stream (an Envoy reading slower
	// than its buckets' actions come; an assignment among them stays
	// charged, which only under-admits).
	Superseded int64
	// Messages is the response messages sent, Actions the bucket actions
	// they carried (up to MaxActionsPerMessage each).
	Messages, Actions int64
}

// BlanketReason is why a blanket action was sent.
type BlanketReason struct {
	Action string // allow_all or deny_all
	Reason string // no_limit, blocked, refused, no_share (a subscribed stream left without a share of its window), expiring (its share about to expire before the window ends)
}

// stats is the server's counters; safe for concurrent use.
type stats struct {
	mu             sync.Mutex
	rules          map[ratelimit.RuleRef]*RuleStats
	streams        int64
	blanket        map[BlanketReason]int64
	skipped        map[string]int64
	badReports     int64
	superseded     int64
	refusedStreams int64
	messages       int64
	actions        int64
	abandons       int64
	calls          int64
}

func newStats() *stats {
	return &stats{rules: map[ratelimit.RuleRef]*RuleStats{}, blanket: map[BlanketReason]int64{}, skipped: map[string]int64{}}
}

// rule updates r's counters with f.
func (s *stats) rule(r ratelimit.RuleRef, f func(*RuleStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rs := s.rules[r]
	if rs == nil {
		rs = &RuleStats{Rule: r}
		s.rules[r] = rs
	}
	f(rs)
}

func (s *stats) add(f func(*stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *stats) snapshot() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Stats{StreamsOpen: s.streams, BadReports: s.badReports, Superseded: s.superseded, RefusedStreams: s.refusedStreams, Messages: s.messages, Actions: s.actions, Abandons: s.abandons, StoreCalls: s.calls,
		Blanket: make(map[BlanketReason]int64, len(s.blanket)), Skipped: make(map[string]int64, len(s.skipped))}
	for _, r := range s.rules {
		out.Rules = append(out.Rules, *r)
	}
	for k, v := range s.blanket {
		out.Blanket[k] = v
	}
	for k, v := range s.skipped {
		out.Skipped[k] = v
	}
	return out
}
