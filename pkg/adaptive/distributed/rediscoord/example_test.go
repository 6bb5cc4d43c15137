package rediscoord_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// Example sends one node's heartbeat to a coordinator on Redis's clock and
// carries the lease end over to the node's clock. It is compiled but not
// run (no Output): it needs a Redis server, and the tests start their own.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	coord, err := rediscoord.New(client, rediscoord.Options{ServerTime: true})
	if err != nil {
		log.Fatal(err)
	}
	cfg := distributed.Config{LeaseTTL: 3 * time.Second, Aggregate: distributed.Median, Handoff: true}
	rep := distributed.Report{Node: "sidecar-7", Instance: "boot-1f3a", Seq: 1, Local: 40, Inflight: 12}
	sent := time.Now()
	g, err := coord.Heartbeat(ctx, "checkout", rep, cfg, sent)
	if err != nil {
		log.Fatal(err)
	}
	// The lease ends ExpiresAt − Now after Redis stamped the grant: on the
	// node's clock, no later than that after the heartbeat was sent.
	leaseEnd := sent.Add(time.Duration(g.ExpiresAt-g.Now) * time.Microsecond)
	fmt.Println(g.Share, g.Global, g.Live, leaseEnd)
}
