package gale_test

import (
	"context"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// A GCRA rule of 10 per second with a burst of 3, checked on a fixed
// timeline: the burst goes at once, then one unit every 100 ms.
func ExampleRule_Take() {
	r := gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second, Burst: 3}
	var s gale.State
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := 0; i < 4; i++ {
		var o gale.Outcome
		s, o = r.Take(s, now, 1, 1)
		fmt.Printf("granted=%d remaining=%d retry=%v\n", o.Granted, o.Remaining, time.Duration(o.RetryAfter)*time.Microsecond)
	}
	// Output:
	// granted=1 remaining=2 retry=0s
	// granted=1 remaining=1 retry=0s
	// granted=1 remaining=0 retry=0s
	// granted=0 remaining=0 retry=100ms
}

// Two nodes in leased mode share one limit of 10 per minute through a store:
// each leases batches of 4 and serves them locally; together they admit 10.
func ExampleLimiter_leased() {
	store := memstore.New()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
	var nodes []*gale.Limiter
	for i := 0; i < 2; i++ {
		l, err := gale.New(store, gale.Config{Rule: rule, Mode: gale.Leased, Lease: gale.LeaseConfig{Batch: 4}})
		if err != nil {
			panic(err)
		}
		defer l.Close(context.Background())
		nodes = append(nodes, l)
	}
	now := time.Date(2027, 1, 1, 0, 0, 30, 0, time.UTC)
	admitted := 0
	for i := 0; i < 30; i++ {
		d, err := nodes[i%2].Check(context.Background(), "client-1", 1, now)
		if err != nil {
			panic(err)
		}
		if d.Allowed {
			admitted++
		}
	}
	fmt.Println("admitted:", admitted)
	fmt.Println("leases:", nodes[0].Stats().LeasesGranted+nodes[1].Stats().LeasesGranted)
	// Output:
	// admitted: 10
	// leases: 3
}
