package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

var (
	bg = context.Background()
	t0 = time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)
)

// modes are the rule kinds every test runs: descriptor key → the lines of
// its rule after rate_limit.
var modes = []struct{ key, extra string }{
	{"strict", ""},
	{"cached_deny", "    mode: cached_deny\n"},
	{"leased", "    mode: leased\n    lease: {batch: 4}\n"},
	{"leased_uncoupled", "    mode: leased\n    lease: {batch: 4, window_coupled: false}\n"},
	{"fair", "    fairness: {tenant_key: fair}\n"},
}

// modePolicy is domain "cl": one rule per mode on descriptor key = the
// mode's name, limit per minute, on_store_error onErr.
func modePolicy(limit int, unit, onErr string) string {
	var b strings.Builder
	b.WriteString("domain: cl\ndescriptors:\n")
	for _, m := range modes {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {name: %s, unit: %s, requests_per_unit: %d}\n    on_store_error: %s\n%s",
			m.key, m.key, unit, limit, onErr, m.extra)
	}
	return b.String()
}

// newEngine returns an engine over a Redis store on client with opts,
// loaded with the policy src, closed on cleanup. Its limiters' timers run
// on a fake clock that never moves: no background work races the test's
// requests.
func newEngine(t testing.TB, client redis.UniversalClient, opts redisstore.Options, src string, storeTimeout time.Duration) (*engine.Engine, *redisstore.Store) {
	t.Helper()
	s, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e, err := engine.New(engine.Options{Store: s, StoreTimeout: storeTimeout, Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(bg) })
	d, err := policy.Parse("cl.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if err := e.Load(bg, &policy.Set{Domains: []*policy.Domain{d}}); err != nil {
		t.Fatal(err)
	}
	return e, s
}

// request is one descriptor {mode: value} of domain cl, with hits.
func request(mode, value string, hits uint32) *engine.Request {
	return &engine.Request{Domain: "cl", HitsAddend: hits,
		Descriptors: []engine.Descriptor{{Entries: []engine.Entry{{Key: mode, Value: value}}}}}
}

// answer renders a response for comparison: the overall code and every
// status's code, limit name, remaining and time until reset.
func answer(r *engine.Response) string {
	var b strings.Builder
	b.WriteString(r.Code.String())
	for _, s := range r.Statuses {
		name := "-"
		if s.Limit != nil {
			name = s.Limit.Name
		}
		fmt.Fprintf(&b, " [%s %s rem=%d reset=%v]", s.Code, name, s.Remaining, s.UntilReset)
	}
	return b.String()
}

// splitAddr splits host:port.
func splitAddr(t testing.TB, addr string) (host, port string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}
