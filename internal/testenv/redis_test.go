package testenv

import (
	"context"
	"testing"
	"time"
)

func TestStartRedisAndRestart(t *testing.T) {
	r := StartRedis(t)
	c := r.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	calls, err := r.CommandCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls["set"] != 1 {
		t.Fatalf("commandstats set = %d, want 1 (%v)", calls["set"], calls)
	}
	r.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping succeeded against a killed server")
	}
	r.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after restart: %v", err)
	}
	if v, _ := c.Get(ctx, "k").Result(); v != "" {
		t.Fatalf("restarted server kept data: %q", v)
	}
}

func TestParseCommandStats(t *testing.T) {
	got := parseCommandStats("# Commandstats\r\ncmdstat_evalsha:calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0\r\ncmdstat_ping:calls=3,usec=1\r\n")
	if got["evalsha"] != 12 || got["ping"] != 3 || len(got) != 2 {
		t.Fatalf("got %v", got)
	}
}
