package redisstore_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

func TestWaitReplicasRejectsBadOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisstore.Options{
		{WaitReplicas: -1},
		{WaitReplicas: 1, WaitTimeout: -time.Millisecond},
		{WaitReplicas: 1, Timeout: time.Second, WaitTimeout: 2 * time.Second},
	} {
		if _, err := redisstore.New(c, o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if _, err := redisstore.New(cc, redisstore.Options{WaitReplicas: 1}); err == nil {
		t.Error("New(cluster client, WaitReplicas 1) succeeded: WAIT would not cover the round trip's servers")
	}
}

// TestWaitReplicasWithoutReplicas: a server with no replica cannot
// acknowledge a check that waits for one: every check fails, wrapping
// ErrNotReplicated, after a WAIT bounded by WaitTimeout, fixed windows
// (fused) and others alike; leases are not waited for. Judged by the WAIT
// each round trip sent, not by how long it took.
func TestWaitReplicasWithoutReplicas(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := srv.Client()
	cmds := &testenv.Sent{}
	c.AddHook(cmds)
	s, err := redisstore.New(c, redisstore.Options{WaitReplicas: 1, WaitTimeout: 20 * time.Millisecond, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := timeline()
	for _, r := range []gale.Rule{minute, {Algorithm: gale.SlidingWindow, Limit: 100, Period: time.Minute}} {
		_, err := s.Check(ctx, "k", r, 1, now)
		if !errors.Is(err, redisstore.ErrNotReplicated) {
			t.Fatalf("%v check with no replica: err %v, want ErrNotReplicated", r.Algorithm, err)
		}
		// A NOSCRIPT's EVAL is a second round trip, with its own WAIT.
		waits := cmds.Take("wait")
		if len(waits) == 0 {
			t.Fatalf("%v check sent no WAIT", r.Algorithm)
		}
		for _, w := range waits {
			if got := strings.Join(w.Args, " "); got != "wait 1 20" {
				t.Fatalf("%v check sent %q, want WAIT for 1 replica within 20ms", r.Algorithm, got)
			}
		}
	}
	if _, err := s.Lease(ctx, "k", minute, 1, 10, now); err != nil {
		t.Fatalf("lease with WaitReplicas and no replica: %v (leases are not waited for)", err)
	}
	if w := cmds.Take("wait"); len(w) != 0 {
		t.Fatalf("a lease sent %v", w[0].Args)
	}
}

// TestWaitReplicasWithAReplica: with the replica of a Sentinel setup up,
// checks through the failover client succeed and each round trip that
// carried one sent WAIT; asking for two replicas of one fails.
func TestWaitReplicasWithAReplica(t *testing.T) {
	env := testenv.StartSentinel(t)
	c := env.Client()
	// The replica's acknowledgement is not what the test times: its WAIT
	// has half of StoreDeadline, not half of the 1s default.
	s, err := redisstore.New(c, redisstore.Options{WaitReplicas: 1, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := timeline()
	for i := 0; i < 5; i++ {
		if d, err := s.Check(ctx, "k", minute, 1, now); err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v, %v", i, d, err)
		}
	}
	if n := waitCalls(t, env.ServerClient(env.Primary())); n < 5 {
		t.Fatalf("primary ran WAIT %d times for 5 checks", n)
	}
	two, err := redisstore.New(c, redisstore.Options{WaitReplicas: 2, WaitTimeout: 10 * time.Millisecond, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	if _, err := two.Check(ctx, "k2", minute, 1, now); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("check waiting for 2 replicas of 1: %v, want ErrNotReplicated", err)
	}
}

// waitCalls is how many times c's server has run WAIT (INFO commandstats).
func waitCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_wait:calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	return n
}

// BenchmarkWaitReplicas measures what Options.WaitReplicas costs a check: a
// primary and its replica (testenv.StartSentinel), the store as the sidecar
// runs it (ServerTime, a sliding window), checks without WAIT and with
// WAIT 1, from 1 caller and from 16: ns/op is the latency per check (1
// caller) or the inverse throughput (16), redis-µs/op the primary's CPU per
// check.
//
//	go test -run '^$' -bench WaitReplicas -count 5 -benchtime 2s ./pkg/gale/redisstore/ | tee wait.txt
//	benchstat -col /wait wait.txt
func BenchmarkWaitReplicas(b *testing.B) {
	env := testenv.StartSentinel(b)
	c := env.Client()
	rule := gale.Rule{Algorithm: gale.SlidingWindow, Limit: gale.MaxLimit, Period: time.Hour}
	for _, callers := range []int{1, 16} {
		for _, wait := range []int{0, 1} {
			b.Run(fmt.Sprintf("callers=%d/wait=%d", callers, wait), func(b *testing.B) {
				s, err := redisstore.New(c, redisstore.Options{ServerTime: true, WaitReplicas: wait})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				now := time.Now()
				if _, err := s.Check(ctx, "warm-up", rule, 1, now); err != nil { // cache the script
					b.Fatal(err)
				}
				redisCPU(b, c, callers, func(key string) error {
					_, err := s.Check(ctx, key, rule, 1, now)
					return err
				})
			})
		}
	}
}
