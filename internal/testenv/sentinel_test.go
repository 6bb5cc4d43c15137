package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestStartSentinelAndFailover: a write through the failover client reaches
// the replica; after CutReplication a second one does not, for longer than
// a replica takes to reconnect (1 s); after KillPrimary the sentinels
// promote the replica, which kept the first write and lost the second, and
// the same client (found again through the sentinels) writes to it; the
// URL parses to the same sentinels.
func TestStartSentinelAndFailover(t *testing.T) {
	s := StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	replicas := s.Replicas()
	if len(replicas) != 1 {
		t.Fatalf("replicas %v, want one", replicas)
	}
	// WAIT: the write has reached the replica before the primary dies.
	if n, err := c.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}
	s.CutReplication()
	if err := c.Set(ctx, "lost", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Wait(ctx, 1, 1500*time.Millisecond).Result(); err != nil || n != 0 {
		t.Fatalf("WAIT 1 after CutReplication: %d replicas, %v; want 0", n, err)
	}
	old := s.KillPrimary()
	start := time.Now()
	next := s.WaitFailover(sentinelWait)
	t.Logf("failover %s → %s in %v", old, next, time.Since(start))
	if next != replicas[0] {
		t.Fatalf("promoted %s, want the replica %s", next, replicas[0])
	}
	if got := s.Primary(); got != next {
		t.Fatalf("Primary() = %s after failover, want %s", got, next)
	}
	var v string
	if !Eventually(func() bool {
		var err error
		v, err = c.Get(ctx, "k").Result()
		return err == nil
	}) {
		t.Fatal("the failover client never reached the new primary")
	}
	if v != "v" {
		t.Fatalf("GET k = %q on the new primary, want the replicated v", v)
	}
	if n, err := c.Exists(ctx, "lost").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS lost = %d, %v on the new primary: a write made after CutReplication was replicated", n, err)
	}
	if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
		t.Fatalf("write to the new primary: %v", err)
	}
	if len(s.Replicas()) != 0 {
		t.Fatalf("replicas %v after the primary died, want none", s.Replicas())
	}

	o, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		t.Fatalf("ParseFailoverURL(%s): %v", s.URL(), err)
	}
	if o.MasterName != MasterName || len(o.SentinelAddrs) != 3 {
		t.Fatalf("URL %s parses to master %q, sentinels %v", s.URL(), o.MasterName, o.SentinelAddrs)
	}
	for i, a := range o.SentinelAddrs {
		if a != s.Sentinels[i] {
			t.Fatalf("URL sentinels %v, want %v", o.SentinelAddrs, s.Sentinels)
		}
	}
}
