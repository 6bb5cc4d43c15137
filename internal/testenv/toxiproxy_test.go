package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

func TestProxy(t *testing.T) {
	srv := testenv.StartRedis(t)
	p := testenv.StartProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Blackhole("downstream")
	if err := c.Incr(ctx, "k").Err(); err == nil {
		t.Fatal("a reply came back through a downstream blackhole")
	}
	p.Heal()
	// The request went through; only its reply was held.
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "2" {
		t.Fatalf("after healing: %q, %v; want 2 (the INCR reached Redis)", got, err)
	}
}
