package envoyrls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/envoyrls"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// chargePolicy is a token budget of 10 per hour per user, in mode (and
// with its lease or federation block).
const chargePolicy = `
domain: ai
descriptors:
  - key: user
    %s
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// chargeStep is one call of the script, as Envoy sends it: a descriptor
// user=<user> with the descriptor-level hits_addend Envoy sets for a
// cost-based limit (nil: none, a plain request), and the request-level
// hits_addend (0: unset).
type chargeStep struct {
	name    string
	advance time.Duration
	user    string
	addend  *uint64 // the descriptor's hits_addend
	request uint32  // the request's hits_addend
	// envoyproxy/ratelimit's answer: code, limit_remaining and
	// duration_until_reset (INCRBY key hits; OVER_LIMIT when the count
	// after is above requests_per_unit, else remaining = limit − count).
	code      rlsv3.RateLimitResponse_Code
	remaining uint32
	reset     time.Duration
}

func hits(n uint64) *uint64 { return &n }

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// chargeScript is check-then-charge against a budget of 10 per hour, from
// an hour boundary: the answers envoyproxy/ratelimit gives, step by step.
var chargeScript = []chargeStep{
	{name: "check-only, fresh", user: "alice", addend: hits(0), code: ok, remaining: 10, reset: time.Hour},
	{name: "check-only again: nothing was counted", user: "alice", addend: hits(0), code: ok, remaining: 10, reset: time.Hour},
	{name: "charge 4", advance: time.Minute, user: "alice", addend: hits(4), code: ok, remaining: 6, reset: 59 * time.Minute},
	{name: "a plain request counts 1", user: "alice", code: ok, remaining: 5, reset: 59 * time.Minute},
	{name: "charge 4", user: "alice", addend: hits(4), code: ok, remaining: 1, reset: 59 * time.Minute},
	{name: "check-only", user: "alice", addend: hits(0), code: ok, remaining: 1, reset: 59 * time.Minute},
	{name: "charge 1 reaches the limit", user: "alice", addend: hits(1), code: ok, remaining: 0, reset: 59 * time.Minute},
	{name: "check-only at the limit exactly", user: "alice", addend: hits(0), code: ok, remaining: 0, reset: 59 * time.Minute},
	{name: "charge 5 overruns: OVER_LIMIT, and counted", user: "alice", addend: hits(5), code: over, remaining: 0, reset: 59 * time.Minute},
	{name: "check-only after the overrun", advance: time.Minute, user: "alice", addend: hits(0), code: over, remaining: 0, reset: 58 * time.Minute},
	{name: "a plain request after the overrun", user: "alice", code: over, remaining: 0, reset: 58 * time.Minute},
	{name: "another charge is counted all the same", user: "alice", addend: hits(2), code: over, remaining: 0, reset: 58 * time.Minute},
	{name: "a request-level hits_addend of 0 means 1", user: "bob", request: 0, code: ok, remaining: 9, reset: 58 * time.Minute},
	{name: "a request-level hits_addend of 3", user: "bob", request: 3, code: ok, remaining: 6, reset: 58 * time.Minute},
	{name: "the next hour starts afresh", advance: 58 * time.Minute, user: "alice", addend: hits(0), code: ok, remaining: 10, reset: time.Hour},
}

// TestCheckThenChargeAnswersAsUpstream sends the script as Envoy sends it —
// real RateLimitRequests with descriptor-level hits_addend, over gRPC — to
// an engine in every mode on the memory store, Redis and Redis Cluster,
// and requires envoyproxy/ratelimit's answer at every step. Federated
// rules answer the same but for one step, which they cannot tell from an
// overrun (Region.Charge): a check-only call at the limit exactly.
func TestCheckThenChargeAnswersAsUpstream(t *testing.T) {
	// Each store makes a fresh one per mode: the modes' counters are the
	// same keys (a counter does not depend on its mode).
	type newStore func(t *testing.T) gale.Store
	stores := []struct {
		name  string
		start func(t *testing.T) newStore
	}{
		{"memory", func(*testing.T) newStore { return func(*testing.T) gale.Store { return memstore.New() } }},
		{"redis", func(t *testing.T) newStore {
			client := testenv.StartRedis(t).Client()
			return func(t *testing.T) gale.Store { return redisStore(t, client) }
		}},
	}
	if !testing.Short() {
		stores = append(stores, struct {
			name  string
			start func(t *testing.T) newStore
		}{"cluster", func(t *testing.T) newStore {
			client := testenv.StartCluster(t, 3).Client()
			return func(t *testing.T) gale.Store { return redisStore(t, client) }
		}})
	}
	modes := []struct{ name, block string }{
		{"strict", "mode: strict"},
		{"cached_deny", "mode: cached_deny"},
		{"leased", "mode: leased\n    lease: {batch: 3}"},
		{"leased_uncoupled", "mode: leased\n    lease: {batch: 3, window_coupled: false}"},
		{"federated", "mode: federated\n    federation: {batch: 3}"},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			fresh := st.start(t)
			for _, m := range modes {
				t.Run(m.name, func(t *testing.T) {
					runChargeScript(t, fresh(t), m.name, fmt.Sprintf(chargePolicy, m.block))
				})
			}
		})
	}
}

func redisStore(t *testing.T, client redis.UniversalClient) gale.Store {
	t.Helper()
	s, err := redisstore.New(client, redisstore.Options{Prefix: fmt.Sprintf("charge:%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func runChargeScript(t *testing.T, store gale.Store, mode, doc string) {
	d, err := policy.Parse("ai.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	opts := engine.Options{Store: store, StoreTimeout: 5 * time.Second}
	if mode == "federated" {
		coord := federation.NewMemoryCoordinator(nil)
		opts.Federation = func(fr engine.FederatedRule) (engine.Federated, error) {
			r, err := federation.NewRegion(federation.RegionConfig{Name: "eu", Coordinator: coord})
			return engine.Federated{Store: r, Batch: int64(fr.Federation.Batch), Timeout: 5 * time.Second}, err
		}
	}
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.Load(context.Background(), &policy.Set{Domains: []*policy.Domain{d}, Hash: "h"}); err != nil {
		t.Fatal(err)
	}
	// An hour boundary in 2027, ahead of Redis's own clock, so no key
	// expires under the script.
	now := time.Date(2027, 3, 1, 10, 0, 0, 0, time.UTC)
	c := serveGRPC(t, envoyrls.NewRateLimitServer(e, envoyrls.Options{Now: func() time.Time { return now }}))
	for _, s := range chargeScript {
		now = now.Add(s.advance)
		want := s
		if mode == "federated" && s.name == "check-only at the limit exactly" {
			want.code = over // a region cannot tell a spent budget from an overrun one
		}
		req := &rlsv3.RateLimitRequest{Domain: "ai", HitsAddend: s.request, Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "user", Value: s.user}},
		}}}
		if s.addend != nil {
			req.Descriptors[0].HitsAddend = wrapperspb.UInt64(*s.addend)
		}
		resp, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		st := resp.Statuses[0]
		if resp.OverallCode != want.code || st.Code != want.code || st.LimitRemaining != want.remaining || st.DurationUntilReset.AsDuration() != want.reset {
			t.Fatalf("%s: %v, remaining %d, reset in %v; want %v, remaining %d, reset in %v",
				s.name, st.Code, st.LimitRemaining, st.DurationUntilReset.AsDuration(), want.code, want.remaining, want.reset)
		}
	}
}
