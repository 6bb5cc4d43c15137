package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

const (
	us = time.Microsecond
	ms = time.Millisecond
)

// lastInstant bounds the differential clock: big jumps stop past it, well
// before 2^53 µs (2255), the end of the instants a store's scripts compute
// exactly in doubles.
var lastInstant = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// Differential drives ref and sut with one random schedule of steps
// operations from seed and fails at the first step where they answer
// differently, printing the steps before it. The schedule: a few keys, each
// with a rule of any strategy and calendar, extreme limits and periods
// included (a windowed rule sometimes changes to another windowed rule, as
// their states share fields; a bucket's limit and burst sometimes change,
// as a reload changes them); costs up to above capacity; checks, leases and
// returns (of live, stale and made-up windows, of -1 to credits+1 units);
// charges (0, within the capacity, past it, the most a charge may be);
// clock steps onto window boundaries, retry and reset instants and a
// microsecond either side, and jumps across months and years; stale stamps
// (up to a period behind the clock) on windowed rules.
func randomRule(rng *rand.Rand) gale.Rule {
	limits := []int64{1, 2, 3, 5, 10, 100, 1000, 1_000_000, gale.MaxLimit}
	periods := []time.Duration{us, 7 * us, ms, time.Second, 59 * time.Second, time.Hour, 24 * time.Hour, 30 * 24 * time.Hour, 400 * 24 * time.Hour, gale.MaxPeriod}
	for {
		r := gale.Rule{Algorithm: gale.Algorithm(1 + rng.IntN(5)), Limit: limits[rng.IntN(len(limits))]}
		if rng.IntN(3) == 0 {
			r.Limit = 1 + rng.Int64N(50)
		}
		if r.Algorithm == gale.Quota {
			r.Calendar = gale.Calendar(1 + rng.IntN(4))
			return r
		}
		r.Period = periods[rng.IntN(len(periods))]
		if rng.IntN(3) == 0 {
			r.Period = time.Duration(1+rng.Int64N(int64(10*time.Second/us))) * us
		}
		if r.Algorithm == gale.GCRA || r.Algorithm == gale.TokenBucket {
			r.Burst = min(rng.Int64N(3*r.Limit+1), gale.MaxLimit)
		}
		fill := float64(r.Capacity()) * float64(r.Period/us) / float64(r.Limit)
		if fill < 30*365*24*3600e6 && r.Validate() == nil {
			return r
		}
	}
}

// newFigures is r with another limit or burst, or both (the algorithm and
// the period kept), or r when the draw makes no valid rule.
func newFigures(rng *rand.Rand, r gale.Rule) gale.Rule {
	nr := r
	switch rng.IntN(3) {
	case 0:
		nr.Limit = 1 + rng.Int64N(2*r.Limit+1)
	case 1:
		nr.Burst = rng.Int64N(2*r.Capacity() + 2)
	default:
		nr.Limit = randomRule(rng).Limit
		nr.Burst = min(rng.Int64N(3*nr.Limit+1), gale.MaxLimit)
	}
	nr.Limit, nr.Burst = min(nr.Limit, gale.MaxLimit), min(nr.Burst, gale.MaxLimit)
	fill := float64(nr.Capacity()) * float64(nr.Period/us) / float64(nr.Limit)
	if nr.Validate() != nil || fill >= 30*365*24*3600e6 {
		return r
	}
	return nr
}

func randomCost(rng *rand.Rand, r gale.Rule) int64 {
	c := r.Capacity()
	switch x := rng.IntN(10); {
	case x < 5:
		return 1 + rng.Int64N(min(c, 3))
	case x < 9:
		return 1 + rng.Int64N(c)
	default:
		return min(c+1+rng.Int64N(3), gale.MaxLimit)
	}
}

// randomCharge is a charge's units: often 0 (check only), often within
// the capacity, sometimes past it by up to twice, now and then the most a
// charge may be.
func randomCharge(rng *rand.Rand, r gale.Rule) int64 {
	c := r.Capacity()
	switch x := rng.IntN(10); {
	case x < 3:
		return 0
	case x < 6:
		return 1 + rng.Int64N(c)
	case x < 9:
		return min(c+rng.Int64N(2*c+1), gale.MaxLimit)
	default:
		return gale.MaxLimit
	}
}

// span is a rule's characteristic time: its period, or a day for quotas.
func span(r gale.Rule) time.Duration {
	if r.Algorithm == gale.Quota {
		return 24 * time.Hour
	}
	return r.Period
}

func Differential(t *testing.T, ref, sut gale.Store, seed int64, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(seed), 42))
	ctx := context.Background()
	type keyState struct {
		name string
		rule gale.Rule
	}
	keys := make([]keyState, 6)
	for i := range keys {
		keys[i] = keyState{fmt.Sprintf("diff/%d/%d/%d", seed, time.Now().UnixNano(), i), randomRule(rng)}
	}
	type held struct {
		key     int
		rule    gale.Rule
		credits int64
		end     time.Time
	}
	var leases []held
	var last gale.Decision // the latest answer, for jumps to its retry and reset instants
	start := Timeline()
	now := start
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		if len(log) > 10 {
			log = log[len(log)-10:]
		}
		t.Fatalf("seed %d: %s\nlast steps:%s", seed, fmt.Sprintf(format, args...), strings.Join(log, ""))
	}
	for i := 0; i < steps; i++ {
		k := rng.IntN(len(keys))
		switch {
		case rng.IntN(25) > 0:
		case keys[k].rule.Windowed():
			// The state of one windowed rule read by another (they share the
			// fields w, c and p).
			if nr := randomRule(rng); nr.Windowed() {
				keys[k].rule = nr
			}
		default:
			// A bucket's figures change, as a reload that changes a limit's
			// rate or burst does (the engine keeps the key: same algorithm,
			// same period): the state is read by the new figures, and
			// returns of the old figures' leases still arrive.
			keys[k].rule = newFigures(rng, keys[k].rule)
		}
		key, r := keys[k].name, keys[k].rule
		next := now
		switch x := rng.IntN(100); {
		case x < 20: // the same instant
		case x < 45:
			next = now.Add(time.Duration(rng.Int64N(int64(span(r)/4) + 1)))
		case x < 65:
			_, end := r.WindowBounds(now.UnixMicro())
			if end == 0 {
				end = now.Add(span(r)).UnixMicro()
			}
			next = time.UnixMicro(end + rng.Int64N(3) - 1)
		case x < 80:
			to := last.ResetAt
			if rng.IntN(2) == 0 && last.RetryAfter > 0 {
				to = now.Add(last.RetryAfter)
			}
			next = to.Add(time.Duration(rng.Int64N(3)-1) * us)
		case x < 81:
			next = now.AddDate(rng.IntN(3), rng.IntN(13), 0)
		default:
			next = now.Add(time.Duration(rng.Int64N(int64(ms))))
		}
		if next.After(now) && next.Before(lastInstant) {
			now = next
		}
		now = now.Truncate(us).UTC()
		// A stale stamp, now and then: an operation stamped up to a period
		// before the clock, as a request that waited in a queue or a node
		// whose clock runs behind sends it. The clock does not move back.
		at := now
		if r.Windowed() && rng.IntN(10) == 0 {
			if back := now.Add(-time.Duration(rng.Int64N(int64(span(r)) + 1))).Truncate(us); back.After(start) {
				at = back
			}
		}
		cost := randomCost(rng, r)
		switch op := rng.IntN(12); {
		case op < 5:
			log = append(log, fmt.Sprintf("\n  %d %v check %d %v cost %d", i, at.Format(time.RFC3339Nano), k, r, cost))
			a, errA := ref.Check(ctx, key, r, cost, at)
			b, errB := sut.Check(ctx, key, r, cost, at)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
			if !SameDecision(a, b) {
				fail("Check differs:\n  ref %+v\n  sut %+v", a, b)
			}
			last = a
		case op < 8:
			max := min(cost+rng.Int64N(2*r.Capacity()+1), gale.MaxLimit)
			log = append(log, fmt.Sprintf("\n  %d %v lease %d %v %d..%d", i, at.Format(time.RFC3339Nano), k, r, cost, max))
			a, errA := ref.Lease(ctx, key, r, cost, max, at)
			b, errB := sut.Lease(ctx, key, r, cost, max, at)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
			if a.Granted != b.Granted || !a.WindowEnd.Equal(b.WindowEnd) || !a.Now.Equal(b.Now) || !SameDecision(a.Decision, b.Decision) {
				fail("Lease differs:\n  ref %+v\n  sut %+v", a, b)
			}
			if a.Granted > 0 {
				leases = append(leases, held{k, r, a.Granted, a.WindowEnd})
			}
			last = a.Decision
		case op >= 10:
			n := randomCharge(rng, r)
			log = append(log, fmt.Sprintf("\n  %d %v charge %d %v %d", i, at.Format(time.RFC3339Nano), k, r, n))
			a, errA := ref.Charge(ctx, key, r, n, at)
			b, errB := sut.Charge(ctx, key, r, n, at)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
			if !SameDecision(a, b) {
				fail("Charge differs:\n  ref %+v\n  sut %+v", a, b)
			}
			last = a
		default:
			var h held
			switch {
			case len(leases) > 0 && rng.IntN(5) > 0:
				j := rng.IntN(len(leases))
				h = leases[j]
				leases = append(leases[:j], leases[j+1:]...)
				h.credits = rng.Int64N(h.credits+3) - 1 // -1 … credits+1
			default: // a made-up window, maybe the live one
				_, end := r.WindowBounds(now.UnixMicro())
				h = held{k, r, 1 + rng.Int64N(r.Capacity()), time.Time{}}
				if end != 0 && rng.IntN(3) > 0 {
					h.end = time.UnixMicro(end + rng.Int64N(3) - 1)
				}
			}
			key = keys[h.key].name
			log = append(log, fmt.Sprintf("\n  %d %v return %d %v %d of window %v", i, at.Format(time.RFC3339Nano), h.key, h.rule, h.credits, h.end))
			errA := ref.Return(ctx, key, h.rule, h.credits, h.end, at)
			errB := sut.Return(ctx, key, h.rule, h.credits, h.end, at)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
		}
		if len(log) > 64 {
			log = log[32:]
		}
	}
}

// SameDecision reports whether two decisions are equal field by field (times
// compared as instants).
func SameDecision(a, b gale.Decision) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining && a.Overrun == b.Overrun &&
		a.ResetAt.Equal(b.ResetAt) && a.RetryAfter == b.RetryAfter && a.Fallback == b.Fallback &&
		a.WindowEnd.Equal(b.WindowEnd)
}
