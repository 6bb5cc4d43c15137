package memstore_test

import (
	"context"
	"fmt"
	"time"

	"testing"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) gale.Store { return memstore.New() })
}

// TestDifferentialSelf runs the differential driver against two memory stores:
// it checks the driver itself (no false alarms, no panics) on every strategy.
func TestDifferentialSelf(t *testing.T) {
	storetest.Differential(t, memstore.New(), memstore.New(), 1, 20000)
}

// TestSweepForgetsExpiredKeys: keys whose state has expired are dropped as
// the store takes writes, so memory follows the live key set.
func TestSweepForgetsExpiredKeys(t *testing.T) {
	s := memstore.New()
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1, Period: time.Second}
	now := storetest.Timeline()
	for i := 0; i < 100_000; i++ {
		if _, err := s.Check(context.Background(), fmt.Sprintf("old-%d", i), r, 1, now); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(time.Hour)
	for i := 0; i < 300_000; i++ {
		if _, err := s.Check(context.Background(), fmt.Sprintf("new-%d", i%5000), r, 1, later.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n > 10_000 { // the 5,000 live keys, with slack for shards not yet due
		t.Fatalf("store still holds %d keys; the 100,000 expired ones were not swept", n)
	}
}
