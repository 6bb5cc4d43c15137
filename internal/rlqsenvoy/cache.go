package rlqsenvoy

import (
	"sort"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Replacement says what a replaced TokenBucket starts with.
type Replacement int

const (
	// ReplaceRatio is Envoy's newer behaviour (commit c33e7f8, PR 37624): a
	// replacement starts at the old bucket's remaining/max ratio × the new
	// max_tokens; with no live token bucket it starts full. The default.
	ReplaceRatio Replacement = iota
	// ReplaceFull is the older behaviour (commit 0b55961): every new token
	// bucket starts full.
	ReplaceFull
)

// Cache is the filter's bucket cache (GlobalRateLimitClientImpl's
// buckets_cache_) as a pure core: every method takes now and starts no
// goroutine, reads no clock and touches no network. Timers (TTL, fallback) are
// evaluated lazily at their deadlines the next time a bucket is touched, which
// is exact because nothing but a touch can observe them. Not safe for
// concurrent use. Create one with newCache.
type Cache struct {
	settings settings
	mode     Replacement
	base     time.Time // monotonic origin for token bucket arithmetic
	buckets  map[string]*cachedBucket
}

// settings is the part of RateLimitQuotaBucketSettings a bucket captures when
// it is created (filter.cc recordBucketUsage).
type settings struct {
	defaultAction  strategy  // no_assignment_behavior, ALLOW_ALL when unset
	fallback       *strategy // expired_assignment_behavior.fallback_rate_limit
	fallbackTTL    time.Duration
	initialAllowed bool // only a blanket DENY_ALL default denies the first request
}

// cachedBucket is one CachedBucket. Invariant: tb != nil iff the effective
// action is a token bucket.
type cachedBucket struct {
	id         map[string]string
	allowed    uint64
	denied     uint64
	lastReport time.Time

	// action is cached_action; nil means default_action applies.
	action *strategy
	// hasAssignment is true when action came from the server (not the fallback).
	hasAssignment bool
	tb            *tokenBucket
	// expiresAt is the action expiration timer's deadline (valid when
	// hasAssignment); fallbackEnds the fallback expiration timer's.
	expiresAt    time.Time
	fallbackEnds time.Time
	inFallback   bool
}

func newCache(s settings, mode Replacement, base time.Time) *Cache {
	return &Cache{settings: s, mode: mode, base: base, buckets: map[string]*cachedBucket{}}
}

// bucketKey is a canonical form of a BucketId map (Envoy hashes the proto).
func bucketKey(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(id[k])
		b.WriteByte(0)
	}
	return b.String()
}

func (c *Cache) secs(t time.Time) float64 { return t.Sub(c.base).Seconds() }

// decide decides one request for bucket id at now. created reports that the
// bucket was new: its first request was decided by no_assignment_behavior and
// the caller must send the returned immediate report (time_elapsed 0).
func (c *Cache) decide(now time.Time, id map[string]string) (allowed, created bool, initial *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	key := bucketKey(id)
	b, ok := c.buckets[key]
	if !ok {
		b = &cachedBucket{id: copyID(id), lastReport: now}
		if c.settings.initialAllowed {
			b.allowed = 1
		} else {
			b.denied = 1
		}
		c.buckets[key] = b
		return c.settings.initialAllowed, true, c.usage(now, b)
	}
	c.advance(b, now)
	if c.allow(b, now) {
		b.allowed++
		return true, false, nil
	}
	b.denied++
	return false, false, nil
}

// allow is filter.cc shouldAllowRequest.
func (c *Cache) allow(b *cachedBucket, now time.Time) bool {
	s := c.settings.defaultAction
	if b.action != nil {
		s = *b.action
	}
	switch s.kind {
	case kindBlanket:
		return s.allowAll
	case kindTokenBucket:
		return b.tb.consume(c.secs(now))
	default: // RequestsPerTimeUnit, STRATEGY_NOT_SET: fail open
		return true
	}
}

// advance fires the bucket's expiration timers whose deadlines are ≤ now, at
// their deadlines (onActionExpirationTimer, onFallbackExpirationTimer).
func (c *Cache) advance(b *cachedBucket, now time.Time) {
	if b.hasAssignment && !now.Before(b.expiresAt) {
		at := b.expiresAt
		b.hasAssignment = false
		fb := c.settings.fallback
		if fb == nil {
			b.action, b.tb = nil, nil
			return
		}
		var tb *tokenBucket
		if fb.kind == kindTokenBucket {
			if c.shouldReplace(b, fb.tb) {
				tb = c.newBucketFrom(fb.tb, b.tb, at)
			} else {
				tb = b.tb
			}
		}
		a := *fb
		b.action, b.tb = &a, tb
		b.inFallback, b.fallbackEnds = true, at.Add(c.settings.fallbackTTL)
	}
	if b.inFallback && !now.Before(b.fallbackEnds) {
		b.inFallback = false
		b.action, b.tb = nil, nil
	}
}

// shouldReplace is shouldReplaceTokenBucket: replace unless the cached action
// is a token bucket "equal" to p.
func (c *Cache) shouldReplace(b *cachedBucket, p tbParams) bool {
	return b.action == nil || b.action.kind != kindTokenBucket || !b.action.tb.equalForEnvoy(p)
}

func (c *Cache) newBucketFrom(p tbParams, old *tokenBucket, at time.Time) *tokenBucket {
	now := c.secs(at)
	return newTokenBucket(p.maxTokens, p.fillRate(), now, initialTokens(c.mode, p.maxTokens, old, now))
}

// apply is onQuotaResponseImpl. It returns how many actions it ignored
// (missing or unknown bucket id, RequestsPerTimeUnit, no strategy).
func (c *Cache) apply(now time.Time, resp *rlqsv3.RateLimitQuotaResponse) (ignored int) {
	for _, act := range resp.GetBucketAction() {
		id := act.GetBucketId().GetBucket()
		if len(id) == 0 {
			ignored++
			continue
		}
		key := bucketKey(id)
		b, ok := c.buckets[key]
		if !ok {
			ignored++
			continue
		}
		c.advance(b, now)
		switch a := act.GetBucketAction().(type) {
		case *rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_:
			delete(c.buckets, key)
			continue
		case *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_:
			s := strategyFromProto(a.QuotaAssignmentAction.GetRateLimitStrategy())
			var tb *tokenBucket
			switch s.kind {
			case kindBlanket:
			case kindTokenBucket:
				if c.shouldReplace(b, s.tb) {
					tb = c.newBucketFrom(s.tb, b.tb, now)
				} else {
					tb = b.tb
				}
			default: // RequestsPerTimeUnit, not set: skipped, bucket unchanged
				ignored++
				continue
			}
			b.action, b.tb = &s, tb
			b.expiresAt = now.Add(ttlOf(a.QuotaAssignmentAction.GetAssignmentTimeToLive()))
		default:
			// Neither assignment nor abandon: Envoy caches the empty action
			// (it fails open) with a 0 s TTL, so it expires at once.
			s := strategy{kind: kindUnset}
			b.action, b.tb = &s, nil
			b.expiresAt = now
		}
		b.hasAssignment, b.inFallback = true, false
		c.advance(b, now) // a 0 s TTL fires at once
	}
	return ignored
}

// ttlOf is startActionExpirationTimer's TTL: only the seconds are used.
func ttlOf(d *durationpb.Duration) time.Duration {
	return time.Duration(d.GetSeconds()) * time.Second
}

// reports is buildReports(): every cached bucket's usage since its last
// report, counters reset, time_elapsed in whole seconds (truncated).
func (c *Cache) reports(now time.Time) []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	keys := make([]string, 0, len(c.buckets))
	for k := range c.buckets {
		keys = append(keys, k)
	}
	sort.Strings(keys) // Envoy's map order is arbitrary; ours is stable
	out := make([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, 0, len(keys))
	for _, k := range keys {
		out = append(out, c.usage(now, c.buckets[k]))
	}
	return out
}

// usage is getUsageFromBucket: take and reset the counters and the report time.
func (c *Cache) usage(now time.Time, b *cachedBucket) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId:           &rlqsv3.BucketId{Bucket: copyID(b.id)},
		NumRequestsAllowed: b.allowed,
		NumRequestsDenied:  b.denied,
		TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
	}
	b.allowed, b.denied, b.lastReport = 0, 0, now
	return u
}

func copyID(id map[string]string) map[string]string {
	out := make(map[string]string, len(id))
	for k, v := range id {
		out[k] = v
	}
	return out
}
