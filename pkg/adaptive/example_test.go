package adaptive_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

// A gate driven by AIMD on a fixed timeline: a round trip of fast answers
// to requests admitted at the limit raises it by one (and the rise doubles
// each round trip until the first cut); a 5xx halves what was in flight
// when the failed request was admitted.
func Example() {
	ctrl, err := adaptive.NewAIMD(adaptive.AIMDConfig{MinLimit: 1, MaxLimit: 10, InitialLimit: 1, Timeout: time.Second})
	if err != nil {
		panic(err)
	}
	gate, err := adaptive.NewGate(adaptive.GateConfig{Name: "checkout", Controller: ctrl})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

	a, _ := gate.TryAcquire(t0)
	if _, err := gate.Acquire(context.Background(), t0); errors.Is(err, adaptive.ErrLimit) {
		fmt.Println("second request:", err)
	}
	a.Release(t0.Add(20*time.Millisecond), adaptive.OK) // a round trip: the one request, admitted at the limit
	a.Release(t0.Add(30*time.Millisecond), adaptive.OK) // idempotent: no effect
	fmt.Println("limit after a fast answer:", gate.Limit())
	b, _ := gate.TryAcquire(t0.Add(30 * time.Millisecond))
	b.Release(t0.Add(40*time.Millisecond), adaptive.Error) // b was admitted with 1 in flight

	s := gate.Snapshot()
	fmt.Printf("%s/%s: limit=%d inflight=%d allowed=%d rejected=%d up=%d down=%d errors=%.0f%%\n",
		s.Name, s.Controller, s.Limit, s.Inflight, s.Allowed, s.Rejected, s.AdjustedUp, s.AdjustedDown, 100*s.ErrorRate)
	// Output:
	// second request: adaptive: concurrency limit reached
	// limit after a fast answer: 2
	// checkout/aimd: limit=1 inflight=0 allowed=2 rejected=1 up=1 down=1 errors=50%
}
