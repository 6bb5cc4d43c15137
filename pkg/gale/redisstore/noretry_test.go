package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestLostReplyIsNotResent: a Cluster client resends a node's pipeline
// after a network error up to MaxRedirects times, whatever MaxRetries says,
// and a resent check is counted again. The store's commands refuse it:
// checks run on the server while a partition holds their replies, then the
// connection drops; each is counted once, and its caller gets an error.
func TestLostReplyIsNotResent(t *testing.T) {
	cluster := testenv.StartCluster(t, 1)
	proxy := testenv.StartProxy(t, cluster.Addrs[0])
	client := cluster.ClientThrough(proxy.Addr, 2*time.Second)
	s, err := redisstore.New(client, redisstore.Options{Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: time.Hour}
	now := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Hour)
	const keys = 8
	for k := range keys { // scripts cached, one unit counted each
		if _, err := s.Check(ctx, fmt.Sprint("k", k), rule, 1, now); err != nil {
			t.Fatal(err)
		}
	}
	node := cluster.NodeClient(cluster.Addrs[0])
	counted := func(k int) int {
		n, _ := strconv.Atoi(node.HGet(ctx, s.Key(fmt.Sprint("k", k)), "c").Val())
		return n
	}
	proxy.Blackhole("downstream") // requests arrive and run; replies do not come back
	var wg sync.WaitGroup
	for k := range keys {
		wg.Add(1)
		go func() { // concurrent: they travel in pipelines
			defer wg.Done()
			// A check whose reply was lost fails; one that had not gone
			// out when the partition healed is answered.
			_, _ = s.Check(ctx, fmt.Sprint("k", k), rule, 1, now)
		}()
	}
	// Once checks have run, the partition heals: it drops the connections
	// that carried them, and their replies are lost. (Checks a new
	// connection was to carry wait for its handshake, held too; they go
	// out after healing.)
	ran := testenv.Eventually(func() bool {
		for k := range keys {
			if counted(k) == 2 {
				return true
			}
		}
		return false
	})
	proxy.Heal()
	wg.Wait()
	if !ran {
		t.Fatal("no check reached the server through the proxy")
	}
	for k := range keys {
		// 1 is a check that failed before it went out (a connection
		// whose handshake the partition held): an error, nothing counted.
		if n := counted(k); n > 2 {
			t.Errorf("key %d: counted %d units on the server for 2 checks: a check whose reply was lost was sent again", k, n)
		}
	}
}
