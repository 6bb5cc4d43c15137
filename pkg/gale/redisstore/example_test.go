package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// Example wires the store as a sidecar does. It is compiled but not run (no
// Output): it needs a Redis server, and the tests start their own.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{ServerTime: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	rule := gale.Rule{Algorithm: gale.SlidingWindow, Limit: 100, Period: time.Minute}
	d, err := store.Check(context.Background(), "tenant-42", rule, 1, time.Now())
	if err != nil {
		log.Fatal(err) // a limiter would apply its OnStoreError policy here
	}
	fmt.Println(d.Allowed, d.Remaining)
}
