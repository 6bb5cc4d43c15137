package gale_test

import (
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
)

// recordingSizer leases what it is told and records the demands it saw.
type recordingSizer struct {
	next    int64
	demands []float64
}

func (r *recordingSizer) Batch() int64           { return r.next }
func (r *recordingSizer) Observe(demand float64) { r.demands = append(r.demands, demand) }

func TestSizerSeesEachWindowsDemandAndSetsTheBatch(t *testing.T) {
	s := &recordingSizer{next: 3}
	l := newLimiter(t, memstore.New(), gale.Config{Rule: perMinute(1000), Mode: gale.Leased,
		Lease: gale.LeaseConfig{Batch: 50, NewSizer: func() gale.BatchSizer { return s }}})
	now := start
	for w, served := range []int{7, 2, 0, 5} {
		for i := 0; i < served; i++ {
			mustCheck(t, l, "k", 1, now.Add(time.Duration(i)*time.Second))
		}
		if served > 0 && l.Stats().LastBatch != s.next {
			t.Fatalf("window %d: leased %d, the sizer said %d", w, l.Stats().LastBatch, s.next)
		}
		s.next++
		now = now.Add(time.Minute)
	}
	mustCheck(t, l, "k", 1, now)
	// Windows with no check are not seen (the key was not used); the others
	// report exactly what they served.
	if got := s.demands; len(got) != 3 || got[0] != 7 || got[1] != 2 || got[2] != 5 {
		t.Fatalf("demands seen %v, want [7 2 5]", got)
	}
}
