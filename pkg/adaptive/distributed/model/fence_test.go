package model

import (
	"fmt"
	"testing"
)

// fenceCase is one self-fencing instance: the margin is derived by search
// and checked against FenceConfig.MinMargin; the state counts of the spaces
// at the least safe margin and one tick below it are pinned.
type fenceCase struct {
	c                  FenceConfig // Margin unset: the test searches it
	safe, unsafeStates int
}

func (fc fenceCase) name() string {
	c := fc.c
	conv := "relative"
	if c.Absolute {
		conv = "absolute"
	}
	return fmt.Sprintf("%s/TTL=%d/D=%d/O=%d/R=%d/beats=%d", conv, c.TTL, c.Drift, c.Offset, c.Hold, c.Beats)
}

var fenceCases = []fenceCase{
	{FenceConfig{TTL: 8, Beats: 1}, 139, 0},
	{FenceConfig{TTL: 8, Drift: 1, Offset: 2, Beats: 1}, 361, 442},
	{FenceConfig{TTL: 8, Drift: 3, Offset: 2, Beats: 1}, 871, 1094},
	{FenceConfig{TTL: 8, Drift: 2, Hold: 2, Beats: 1}, 539, 717},
	{FenceConfig{TTL: 8, Drift: 1, Offset: 1, Beats: 2}, 7558, 10251},
	{FenceConfig{TTL: 8, Drift: 2, Hold: 1, Beats: 2}, 10766, 15566},
	{FenceConfig{TTL: 8, Offset: 2, Beats: 1, Absolute: true}, 141, 151},
	{FenceConfig{TTL: 8, Drift: 1, Offset: 2, Beats: 1, Absolute: true}, 460, 482},
	{FenceConfig{TTL: 8, Drift: 3, Offset: 2, Hold: 2, Beats: 1, Absolute: true}, 1928, 2094},
	{FenceConfig{TTL: 8, Drift: 1, Offset: 1, Hold: 1, Beats: 2, Absolute: true}, 4453, 5217},
}

// TestFenceMargin derives the least safe fence margin by exhaustive search
// — the least margin from 0 up with which no run lets the node have a
// request in flight once the coordinator has reclaimed its lease — and
// checks it against the closed form: D + R when the node carries the lease
// over to its own clock by durations (send reading + ExpiresAt − Now), as
// the offset then cancels; O + D + R when it reads ExpiresAt as a time of
// its own clock. The margin one tick below has a counter-example, logged.
func TestFenceMargin(t *testing.T) {
	for _, fc := range fenceCases {
		t.Run(fc.name(), func(t *testing.T) {
			t.Parallel()
			c := fc.c
			var least, below *FenceResult
			for m := 0; m <= c.TTL && least == nil; m++ {
				c.Margin = m
				r, err := CheckFence(c)
				if err != nil {
					t.Fatal(err)
				}
				if r.Unsafe < 0 {
					least = r
				} else {
					below = r
				}
			}
			if least == nil {
				t.Fatalf("no margin up to the TTL is safe")
			}
			if got, want := least.Config.Margin, c.MinMargin(); got != want {
				t.Fatalf("least safe margin %d, want %d", got, want)
			}
			unsafe := 0
			if below != nil {
				unsafe = below.Space.States()
				t.Logf("margin %d: shortest run to a request in flight after the reclaim:\n%s", below.Config.Margin, below.Trace(below.Unsafe))
			}
			if least.Space.States() != fc.safe || unsafe != fc.unsafeStates {
				t.Errorf("explored %d states at margin %d and %d one below, pinned %d and %d: the model changed",
					least.Space.States(), least.Config.Margin, unsafe, fc.safe, fc.unsafeStates)
			}
		})
	}
}

// TestFenceOffsetCancels checks the reason the relative conversion's margin
// does not depend on O: the spaces with and without an offset are the same
// space, key for key — the node's every comparison is between two readings
// of its own clock.
func TestFenceOffsetCancels(t *testing.T) {
	base := FenceConfig{TTL: 6, Drift: 1, Margin: 1, Beats: 2}
	shifted := base
	shifted.Offset = 3
	a, err := CheckFence(base)
	if err != nil {
		t.Fatal(err)
	}
	b, err := CheckFence(shifted)
	if err != nil {
		t.Fatal(err)
	}
	if a.Space.States() != b.Space.States() || a.Unsafe >= 0 || b.Unsafe >= 0 {
		t.Fatalf("offset 0: %d states (unsafe at %d); offset 3: %d states (unsafe at %d)",
			a.Space.States(), a.Unsafe, b.Space.States(), b.Unsafe)
	}
}
