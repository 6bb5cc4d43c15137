package gale_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// A check stamped in window W can reach the store after window W+1 has
// begun: a request that waited in a queue, or a node whose clock runs
// behind. Stores that use the caller's stamp (the memory store; Redis
// without ServerTime) used to read W+1's state as a stale one and start W
// afresh over it, erasing W+1's count: a limit of 3 admitted 6. A stale stamp
// is now counted in the newest window the store knows.

// TestStaleStampRule drives Rule.Take and Rule.Give directly.
func TestStaleStampRule(t *testing.T) {
	const period = time.Second
	w1 := t0 + int64(period/time.Microsecond)*3/2 // in window W+1
	stale := w1 - int64(period/time.Microsecond)  // in window W
	for _, alg := range []gale.Algorithm{gale.FixedWindow, gale.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			r := gale.Rule{Algorithm: alg, Limit: 3, Period: period}
			var s gale.State
			admitted := 0
			for _, at := range []int64{w1, w1, w1, stale, w1, stale, w1} {
				var o gale.Outcome
				s, o = r.Take(s, at, 1, 1)
				admitted += int(o.Granted)
			}
			if admitted != 3 {
				t.Fatalf("window W+1 admitted %d with stale stamps among its checks, limit 3", admitted)
			}
			// A give stamped in W for units W+1 took goes to W+1 (it names
			// W+1's end); one naming W's end changes nothing.
			_, o := r.Take(gale.State{}, w1, 1, 1)
			if _, changed := r.Give(s, stale, 1, o.WindowEnd); !changed {
				t.Errorf("a give for window W+1 stamped in W was dropped")
			}
			if _, changed := r.Give(s, stale, 1, o.WindowEnd-int64(period/time.Microsecond)); changed {
				t.Errorf("a give for window W, which has ended, changed the state")
			}
		})
	}
}

// TestStaleStampStores holds both caller-clock stores to it.
func TestStaleStampStores(t *testing.T) {
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 3, Period: time.Second}
	w1 := time.UnixMicro(t0).Add(1500 * time.Millisecond)
	stale := w1.Add(-time.Second)
	rs, _ := newRedisStore(t)
	for name, s := range map[string]gale.Store{"memstore": memstore.New(), "redis": rs} {
		t.Run(name, func(t *testing.T) {
			admitted := 0
			for i, at := range []time.Time{w1, w1, stale, w1, stale, w1} {
				d, err := s.Check(context.Background(), fmt.Sprintf("stale/%s", name), r, 1, at)
				if err != nil {
					t.Fatalf("check %d: %v", i, err)
				}
				if d.Allowed {
					admitted++
				}
			}
			if admitted != 3 {
				t.Fatalf("window W+1 admitted %d with stale stamps among its checks, limit 3", admitted)
			}
		})
	}
}
