package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestCalendarBounds compares the scripts' calendar arithmetic (Hinnant's
// civil-from-days in Lua) with the time package over random instants to 2250,
// the boundaries of every month and a microsecond either side of them.
func TestCalendarBounds(t *testing.T) {
	st, _ := newStore(t, redisstore.Options{})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	start := timeline()
	var instants []time.Time
	for m := 0; m < 12*225; m += 1 + rng.IntN(5) {
		b := time.Date(start.Year(), start.Month()+time.Month(m)+1, 1, 0, 0, 0, 0, time.UTC)
		instants = append(instants, b.Add(-us), b, b.Add(us))
		instants = append(instants, b.Add(time.Duration(rng.Int64N(int64(28*24*time.Hour)))).Truncate(us))
	}
	for c := gale.Day; c <= gale.Year; c++ {
		r := gale.Rule{Algorithm: gale.Quota, Limit: 1 << 30, Calendar: c}
		key := fmt.Sprintf("calendar/%d/%v", time.Now().UnixNano(), c)
		for _, at := range instants {
			g, err := st.Lease(ctx, key, r, 1, 1, at)
			if err != nil {
				t.Fatal(err)
			}
			_, end := r.WindowBounds(at.UnixMicro())
			if g.WindowEnd.UnixMicro() != end || g.Granted != 1 {
				t.Fatalf("%v at %v: window end %v, want %v", c, at, g.WindowEnd, time.UnixMicro(end).UTC())
			}
		}
	}
}
