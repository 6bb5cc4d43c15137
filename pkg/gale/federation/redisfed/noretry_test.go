package redisfed_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// TestEscrowRefillIsNotResent: a Cluster client resends a command after a
// network error up to MaxRedirects times whatever MaxRetries says; a
// resent Refill would add its units to the region's balance twice, and the
// region would admit what the coordinator never granted. The escrow's
// commands refuse it: a refill that ran while a partition held its reply,
// then lost the reply when the connection dropped, is stored once. The
// client's read and the escrow's round trip wait StoreDeadline: the dropped
// connection, not a deadline, ends the refill.
func TestEscrowRefillIsNotResent(t *testing.T) {
	cluster := testenv.StartCluster(t, 1)
	proxy := testenv.StartProxy(t, cluster.Addrs[0])
	e, err := redisfed.NewEscrow(cluster.ClientThrough(proxy.Addr, testenv.StoreDeadline), redisfed.EscrowOptions{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	now := storetest.Timeline()
	w := federation.Window{End: now.Add(time.Hour), TTL: time.Hour}
	if n, err := e.Refill(ctx, "warm", 1, w, now); err != nil || n != 1 { // script cached, connection open
		t.Fatalf("refill: %d, %v", n, err)
	}
	node := cluster.NodeClient(cluster.Addrs[0])
	balance := func() int {
		n, _ := strconv.Atoi(node.HGet(ctx, e.Key("k"), "n").Val())
		return n
	}
	proxy.Blackhole("downstream") // the refill arrives and runs; its reply does not come back
	done := make(chan error, 1)
	go func() { _, err := e.Refill(ctx, "k", 7, w, now); done <- err }()
	ran := testenv.EventuallyWithin(testenv.StoreDeadline, func() bool { return balance() == 7 })
	proxy.Heal() // drops the connection that carried it: the reply is lost
	err = <-done
	if !ran {
		t.Fatal("the refill did not reach the server through the proxy")
	}
	switch {
	case err == nil:
		t.Error("a refill whose reply was lost answered without an error")
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		t.Errorf("the refill ended at a deadline (%v), not with the connection the heal dropped: not the case under test", err)
	}
	if got := balance(); got != 7 {
		t.Fatalf("balance %d after one refill of 7: the refill was sent again", got)
	}
}
