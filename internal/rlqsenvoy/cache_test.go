package rlqsenvoy

import (
	"math"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"
)

// The AtomicTokenBucket arithmetic on a fixed timeline, against a naive count.
func TestTokenBucketArithmetic(t *testing.T) {
	cases := []struct {
		name    string
		p       tbParams
		initial uint64
		at      []float64 // request times, seconds
		want    int
	}{
		{"starts with initial, no refill in an instant", tbParams{maxTokens: 5, tokensPerFill: 1, fillSeconds: 1}, 3, []float64{0, 0, 0, 0}, 3},
		{"capped at max", tbParams{maxTokens: 2, tokensPerFill: 1, fillSeconds: 1}, 2, []float64{100, 100, 100}, 2},
		{"empty start refills continuously", tbParams{maxTokens: 2, tokensPerFill: 1, fillSeconds: 2}, 0, []float64{1.9, 2, 2.1, 4}, 2},
		{"sub-second interval: infinite rate", tbParams{maxTokens: 1, tokensPerFill: 1, fillNanos: 999e6}, 0, []float64{0, 0, 0}, 3},
		{"sub-second interval, 0 max: nothing", tbParams{maxTokens: 0, tokensPerFill: 1, fillNanos: 5e8}, 0, []float64{0, 1}, 0},
		{"0 tokens_per_fill: one token a year", tbParams{maxTokens: 1, fillSeconds: 1}, 0, []float64{1e6, 365 * 24 * 3600}, 1},
		{"nanos add to seconds before truncation", tbParams{maxTokens: 1, tokensPerFill: 1, fillSeconds: 1, fillNanos: 999999999}, 0, []float64{1.5}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newTokenBucket(tc.p.maxTokens, tc.p.fillRate(), 0, tc.initial)
			got := 0
			for _, at := range tc.at {
				if b.consume(at) {
					got++
				}
			}
			if got != tc.want {
				t.Fatalf("admitted %d, want %d", got, tc.want)
			}
		})
	}
}

func TestInitialTokens(t *testing.T) {
	old := newTokenBucket(10, 1e-9, 0, 10)
	for i := 0; i < 5; i++ {
		old.consume(0)
	}
	cases := []struct {
		name string
		mode Replacement
		old  *tokenBucket
		max  uint32
		want uint64
	}{
		{"ratio truncates", ReplaceRatio, old, 15, 7},
		{"ratio, no live bucket: full", ReplaceRatio, nil, 15, 15},
		{"full", ReplaceFull, old, 15, 15},
		{"ratio of a 0-max bucket: empty", ReplaceRatio, newTokenBucket(0, 1, 0, 0), 4, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := initialTokens(tc.mode, tc.max, tc.old, 0); got != tc.want {
				t.Fatalf("initial = %d, want %d", got, tc.want)
			}
		})
	}
	if r := (tbParams{tokensPerFill: 0, fillNanos: 1}).fillRate(); !math.IsNaN(r) {
		t.Fatalf("0/0 rate = %v, want NaN as in C++", r)
	}
}

// FuzzApply: any response the server sends is applied without a panic.
func FuzzApply(f *testing.F) {
	seed, _ := proto.Marshal(assign(bucketA, tokenBucketStrategy(3, 1, time.Second), time.Second))
	f.Add(seed)
	seed, _ = proto.Marshal(abandon(bucketA))
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var resp rlqsv3.RateLimitQuotaResponse
		if proto.Unmarshal(data, &resp) != nil {
			return
		}
		fb := strategy{kind: kindTokenBucket, tb: tbParams{maxTokens: 2, tokensPerFill: 1, fillSeconds: 1}}
		c := newCache(settings{defaultAction: strategy{kind: kindBlanket}, fallback: &fb, fallbackTTL: time.Second}, ReplaceRatio, t0)
		c.decide(t0, bucketA)
		c.apply(t0, &resp)
		for i := 0; i < 3; i++ {
			c.decide(t0.Add(time.Duration(i)*time.Second), bucketA)
		}
		c.reports(t0.Add(5 * time.Second))
	})
}

func BenchmarkCacheDecide(b *testing.B) {
	c := newCache(settings{defaultAction: strategy{kind: kindBlanket, allowAll: true}, initialAllowed: true}, ReplaceRatio, t0)
	c.decide(t0, bucketA)
	c.apply(t0, assign(bucketA, tokenBucketStrategy(1<<30, 1, time.Second), time.Hour))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.decide(t0.Add(time.Duration(i)), bucketA)
	}
}
