package redisfed_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// Example leases a region's share of a global budget from the coordinator,
// parks it in the region's escrow for the region's processes to take, and
// at the window's end gives the leftover back once. It is compiled but not
// run (no Output): it needs two Redis servers, and the tests start their
// own.
func Example() {
	ctx := context.Background()
	global := redis.NewClient(&redis.Options{Addr: "global.redis:6379"})
	defer global.Close()
	regional := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer regional.Close()

	coord, err := redisfed.NewCoordinator(global, redisstore.Options{ServerTime: true})
	if err != nil {
		log.Fatal(err)
	}
	defer coord.Close()
	escrow, err := redisfed.NewEscrow(regional, redisfed.EscrowOptions{ServerTime: true})
	if err != nil {
		log.Fatal(err)
	}

	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1000, Period: time.Minute}
	g, err := coord.Lease(ctx, "tenant-42", rule, 1, 100, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	// The units live until the window ends on the coordinator's clock.
	w := federation.Window{End: g.WindowEnd, TTL: g.WindowEnd.Sub(g.Now)}
	if _, err := escrow.Refill(ctx, "tenant-42", g.Granted, w, time.Now()); err != nil {
		log.Fatal(err)
	}
	h, err := escrow.Take(ctx, "tenant-42", 1, 10, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(h.Granted, h.Balance)

	// Later, by the process that wins the release:
	left, err := escrow.Release(ctx, "tenant-42", g.WindowEnd, time.Now())
	if err != nil {
		log.Fatal(err)
	}
	rec := federation.Reconcile{Leftover: left, WindowEnd: g.WindowEnd, Token: "eu-west", Now: time.Now()}
	if _, err := coord.Reconcile(ctx, "tenant-42", rule, rec); err != nil {
		log.Print(err) // a failed reconcile loses capacity, never admits more
	}
}
