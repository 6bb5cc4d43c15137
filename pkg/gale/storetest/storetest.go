// Package storetest is the conformance suite every gale.Store passes: Run
// checks the contract on fixed timelines; Differential drives two stores with
// one random schedule and requires the same answer from both at every step.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Timeline returns a start instant for fake-clock tests: the UTC midnight
// at least a day after the real time, so it sits on every window boundary up
// to a day, and a store that expires keys in real time (Redis) never drops
// live state. Test times only move forward from it.
func Timeline() time.Time {
	return time.Now().UTC().Add(48 * time.Hour).Truncate(24 * time.Hour)
}

// Run runs the contract tests against the store newStore returns. Each subtest
// uses its own keys, so newStore may return one shared store.
func Run(t *testing.T, newStore func(t *testing.T) gale.Store) {
	for _, tc := range append(contractCases[:len(contractCases):len(contractCases)], chargeCases...) {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			h := &harness{t: t, s: s, key: fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()), now: Timeline()}
			tc.run(h)
		})
	}
	t.Run("InvalidArguments", func(t *testing.T) { invalidArguments(t, newStore(t)) })
	t.Run("ConcurrentChecksAdmitExactlyLimit", func(t *testing.T) { concurrentChecks(t, newStore(t)) })
}

// harness walks one key of a store along a fixed timeline.
type harness struct {
	t   *testing.T
	s   gale.Store
	key string
	now time.Time
}

func (h *harness) advance(d time.Duration) { h.now = h.now.Add(d) }

func (h *harness) check(r gale.Rule, cost int64) gale.Decision {
	h.t.Helper()
	d, err := h.s.Check(context.Background(), h.key, r, cost, h.now)
	if err != nil {
		h.t.Fatalf("Check(cost %d) at %v: %v", cost, h.now, err)
	}
	return d
}

func (h *harness) lease(r gale.Rule, min, max int64) gale.Grant {
	h.t.Helper()
	g, err := h.s.Lease(context.Background(), h.key, r, min, max, h.now)
	if err != nil {
		h.t.Fatalf("Lease(%d..%d) at %v: %v", min, max, h.now, err)
	}
	return g
}

func (h *harness) giveBack(r gale.Rule, n int64, windowEnd time.Time) {
	h.t.Helper()
	if err := h.s.Return(context.Background(), h.key, r, n, windowEnd, h.now); err != nil {
		h.t.Fatalf("Return(%d) at %v: %v", n, h.now, err)
	}
}

// want asserts the parts of a decision a step names.
type want struct {
	allowed   bool
	remaining int64
	retry     time.Duration // checked when the decision is a denial
	resetIn   time.Duration // ResetAt − now; checked when non-zero
}

func (h *harness) expect(step string, d gale.Decision, w want) {
	h.t.Helper()
	if d.Allowed != w.allowed || d.Remaining != w.remaining {
		h.t.Fatalf("%s: allowed=%v remaining=%d, want allowed=%v remaining=%d (%+v)", step, d.Allowed, d.Remaining, w.allowed, w.remaining, d)
	}
	if !w.allowed && d.RetryAfter != w.retry {
		h.t.Fatalf("%s: retry after %v, want %v", step, d.RetryAfter, w.retry)
	}
	if w.allowed && d.RetryAfter != 0 {
		h.t.Fatalf("%s: allowed with retry after %v", step, d.RetryAfter)
	}
	if w.resetIn != 0 && !d.ResetAt.Equal(h.now.Add(w.resetIn)) {
		h.t.Fatalf("%s: reset at %v, want now+%v", step, d.ResetAt, w.resetIn)
	}
}

func invalidArguments(t *testing.T, s gale.Store) {
	ctx := context.Background()
	now := Timeline()
	good := gale.Rule{Algorithm: gale.FixedWindow, Limit: 5, Period: time.Second}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"zero cost", func() error { _, err := s.Check(ctx, "k", good, 0, now); return err }, gale.ErrInvalidCost},
		{"negative cost", func() error { _, err := s.Check(ctx, "k", good, -3, now); return err }, gale.ErrInvalidCost},
		{"lease max below min", func() error { _, err := s.Lease(ctx, "k", good, 3, 2, now); return err }, gale.ErrInvalidCost},
		{"zero rule", func() error { _, err := s.Check(ctx, "k", gale.Rule{}, 1, now); return err }, gale.ErrInvalidRule},
		{"zero period", func() error {
			_, err := s.Check(ctx, "k", gale.Rule{Algorithm: gale.GCRA, Limit: 1}, 1, now)
			return err
		}, gale.ErrInvalidRule},
		{"return with zero rule", func() error { return s.Return(ctx, "k", gale.Rule{}, 1, now, now) }, gale.ErrInvalidRule},
		{"return above MaxLimit", func() error { return s.Return(ctx, "k", good, gale.MaxLimit+1, now, now) }, gale.ErrInvalidCost},
		{"negative charge", func() error { _, err := s.Charge(ctx, "k", good, -1, now); return err }, gale.ErrInvalidCost},
		{"charge above MaxLimit", func() error { _, err := s.Charge(ctx, "k", good, gale.MaxLimit+1, now); return err }, gale.ErrInvalidCost},
		{"charge with zero rule", func() error { _, err := s.Charge(ctx, "k", gale.Rule{}, 1, now); return err }, gale.ErrInvalidRule},
	} {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// concurrentChecks: 50 goroutines each check 10 times against a limit of 100
// at one instant; exactly 100 are admitted.
func concurrentChecks(t *testing.T, s gale.Store) {
	r := gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: time.Minute}
	key := fmt.Sprintf("concurrent/%d", time.Now().UnixNano())
	now := Timeline()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for g := 0; g < 50; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				d, err := s.Check(context.Background(), key, r, 1, now)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := admitted.Load(); got != 100 {
		t.Fatalf("admitted %d of 500 concurrent checks, want exactly 100", got)
	}
}
