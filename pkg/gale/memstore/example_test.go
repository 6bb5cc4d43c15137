package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// Leasing from the memory store: a grant is as much as remains up to max, and
// unused credits go back to the window that granted them.
func Example() {
	s := memstore.New()
	ctx := context.Background()
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
	now := time.Date(2027, 1, 1, 0, 0, 10, 0, time.UTC)
	g, _ := s.Lease(ctx, "k", r, 1, 8, now)
	fmt.Println("granted", g.Granted, "until", g.WindowEnd.UTC().Format(time.TimeOnly))
	g2, _ := s.Lease(ctx, "k", r, 1, 8, now)
	fmt.Println("granted", g2.Granted)
	_ = s.Return(ctx, "k", r, 5, g.WindowEnd, now)
	d, _ := s.Check(ctx, "k", r, 5, now)
	fmt.Println("after returning 5:", d.Allowed, d.Remaining)
	// Output:
	// granted 8 until 00:01:00
	// granted 2
	// after returning 5: true 0
}
