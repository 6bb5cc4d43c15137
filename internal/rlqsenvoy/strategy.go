package rlqsenvoy

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// strategyKind is which member of RateLimitStrategy's oneof is set.
type strategyKind int

const (
	kindUnset strategyKind = iota // STRATEGY_NOT_SET: Envoy fails open
	kindBlanket
	kindTokenBucket
	kindRequestsPerTimeUnit
)

// strategy is the part of a RateLimitStrategy Envoy acts on, copied out of the
// proto so that the cache never keeps wire messages.
type strategy struct {
	kind     strategyKind
	allowAll bool     // kindBlanket: ALLOW_ALL (true) or DENY_ALL (false)
	tb       tbParams // kindTokenBucket
}

// tbParams is a TokenBucket as Envoy reads it.
type tbParams struct {
	maxTokens     uint32
	tokensPerFill uint32 // tokens_per_fill.value(); 0 when unset
	fillSeconds   int64  // fill_interval.seconds
	fillNanos     int32  // fill_interval.nanos
}

// equalForEnvoy is global_client_impl.cc's protoTokenBucketsEq: max_tokens,
// tokens_per_fill and fill_interval.nanos are compared; the seconds are not.
func (p tbParams) equalForEnvoy(q tbParams) bool {
	return p.maxTokens == q.maxTokens && p.tokensPerFill == q.tokensPerFill && p.fillNanos == q.fillNanos
}

// fillRate is createTokenBucketFromAction's rate: tokens_per_fill divided by
// the fill interval truncated to whole seconds (a sub-second interval divides
// by zero: +Inf, or NaN when tokens_per_fill is 0, as C++ doubles do).
func (p tbParams) fillRate() float64 {
	secs := (time.Duration(p.fillSeconds)*time.Second + time.Duration(p.fillNanos)) / time.Second
	return float64(p.tokensPerFill) / float64(secs)
}

func strategyFromProto(s *typev3.RateLimitStrategy) strategy {
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return strategy{kind: kindBlanket, allowAll: st.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL}
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := st.TokenBucket
		return strategy{kind: kindTokenBucket, tb: tbParams{
			maxTokens:     tb.GetMaxTokens(),
			tokensPerFill: tb.GetTokensPerFill().GetValue(),
			fillSeconds:   tb.GetFillInterval().GetSeconds(),
			fillNanos:     tb.GetFillInterval().GetNanos(),
		}}
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		return strategy{kind: kindRequestsPerTimeUnit}
	default:
		return strategy{kind: kindUnset}
	}
}

// minFillRate is token_bucket_impl.cc's kMinFillRate: one token a year.
const minFillRate = 1.0 / (365 * 24 * 60 * 60)

// tokenBucket is Envoy's AtomicTokenBucketImpl: no token count is stored, only
// the time (seconds on the filter's monotonic base) at which the bucket was
// empty; tokens at t are min(max, (t − emptyAt) × rate). A request takes one
// whole token. Not safe for concurrent use (the Filter's mutex guards it).
type tokenBucket struct {
	max     float64
	rate    float64
	emptyAt float64
}

// newTokenBucket starts a bucket holding initial tokens at now (seconds).
func newTokenBucket(maxTokens uint32, rate float64, now float64, initial uint64) *tokenBucket {
	r := cppMax(math.Abs(rate), minFillRate)
	b := &tokenBucket{max: float64(maxTokens), rate: r, emptyAt: now}
	if initial != 0 {
		b.emptyAt = now - float64(initial)/r
	}
	return b
}

// remaining is remainingTokens(): fractional tokens available at now.
func (b *tokenBucket) remaining(now float64) float64 {
	return cppMin(b.max, (now-b.emptyAt)*b.rate)
}

// consume takes one token at now if a whole one is there (consume(1, false)).
func (b *tokenBucket) consume(now float64) bool {
	total := b.remaining(now)
	if !(total >= 1) {
		return false
	}
	b.emptyAt = now - (total-1)/b.rate
	return true
}

// cppMin and cppMax are std::min and std::max on doubles, NaN included:
// std::min(a, b) is (b < a) ? b : a.
func cppMin(a, b float64) float64 {
	if b < a {
		return b
	}
	return a
}

func cppMax(a, b float64) float64 {
	if a < b {
		return b
	}
	return a
}

// initialTokens is what a replacement bucket starts with.
//
//   - ReplaceFull (commit 0b559611553841f503171457578e8fcea6a82b17): max_tokens.
//   - ReplaceRatio (commit c33e7f824b9946853a80e839d6e80ef2a09f3bb4):
//     max_tokens × (old remaining / old max), truncated to an integer, when a
//     live token bucket is replaced; max_tokens when there is none.
func initialTokens(mode Replacement, maxTokens uint32, old *tokenBucket, now float64) uint64 {
	if mode == ReplaceFull || old == nil {
		return uint64(maxTokens)
	}
	v := float64(maxTokens) * (old.remaining(now) / old.max)
	if math.IsNaN(v) || v <= 0 {
		// A NaN ratio (old max 0) converts to an undefined value in C++;
		// we take 0, an empty bucket.
		return 0
	}
	if v >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(v)
}
