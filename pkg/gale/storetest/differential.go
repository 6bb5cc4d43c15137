package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Differential drives ref and sut with one random schedule of steps operations
// from seed — keys bound to rules of all five strategies, every calendar,
// costs up to above capacity, checks, leases and returns (of live and of
// stale windows), and clock steps that land on window boundaries and a
// microsecond either side of them — and fails at the first step where the two
// stores answer differently. The schedule is printed on failure.
func Differential(t *testing.T, ref, sut gale.Store, seed int64, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	run := fmt.Sprintf("diff/%d/%d", seed, time.Now().UnixNano())
	keys := randomKeys(rng, run)
	now := Timeline()
	type held struct {
		key       int
		credits   int64
		windowEnd time.Time
	}
	var leases []held
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		tail := log
		if len(tail) > 12 {
			tail = tail[len(tail)-12:]
		}
		t.Fatalf("seed %d step %d: %s\nlast steps:\n  %s", seed, len(log), fmt.Sprintf(format, args...), joinLines(tail))
	}
	ctx := context.Background()
	// The clock stays before 2150, well inside the instants a store can
	// compute with exactly (Lua's doubles hold Unix µs up to 2255).
	horizon := time.Date(2150, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < steps; i++ {
		k := rng.IntN(len(keys))
		key, r := keys[k].name, keys[k].rule
		was := now
		switch x := rng.IntN(100); {
		case x < 25:
			// stay at this instant
		case x < 55:
			now = now.Add(time.Duration(rng.Int64N(int64(spanOf(r)/4) + 1)))
		case x < 75:
			_, end := r.WindowBounds(now.UnixMicro())
			if end == 0 {
				end = now.Add(spanOf(r)).UnixMicro()
			}
			now = time.UnixMicro(end + rng.Int64N(3) - 1).UTC()
		case x < 78:
			now = now.AddDate(0, 0, rng.IntN(400))
		default:
			now = now.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
		}
		if now.After(horizon) {
			now = was
		}
		now = now.Truncate(time.Microsecond)
		cost := randomCost(rng, r)
		switch op := rng.IntN(10); {
		case op < 5:
			log = append(log, fmt.Sprintf("%v check %s (%v) cost %d", now.Format(time.RFC3339Nano), key, r, cost))
			a, errA := ref.Check(ctx, key, r, cost, now)
			b, errB := sut.Check(ctx, key, r, cost, now)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
			if !sameDecision(a, b) {
				fail("Check differs:\n  ref %+v\n  sut %+v", a, b)
			}
		case op < 8:
			max := cost + rng.Int64N(2*r.Capacity()+1)
			log = append(log, fmt.Sprintf("%v lease %s (%v) %d..%d", now.Format(time.RFC3339Nano), key, r, cost, max))
			a, errA := ref.Lease(ctx, key, r, cost, max, now)
			b, errB := sut.Lease(ctx, key, r, cost, max, now)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
			if a.Granted != b.Granted || !a.WindowEnd.Equal(b.WindowEnd) || !a.Now.Equal(b.Now) || !sameDecision(a.Decision, b.Decision) {
				fail("Lease differs:\n  ref %+v\n  sut %+v", a, b)
			}
			if a.Granted > 0 {
				leases = append(leases, held{k, a.Granted, a.WindowEnd})
			}
		default:
			if len(leases) == 0 {
				continue
			}
			j := rng.IntN(len(leases))
			l := leases[j]
			leases = append(leases[:j], leases[j+1:]...)
			n := 1 + rng.Int64N(l.credits)
			key, r = keys[l.key].name, keys[l.key].rule
			log = append(log, fmt.Sprintf("%v return %s (%v) %d of window %v", now.Format(time.RFC3339Nano), key, r, n, l.windowEnd))
			errA := ref.Return(ctx, key, r, n, l.windowEnd, now)
			errB := sut.Return(ctx, key, r, n, l.windowEnd, now)
			if errA != nil || errB != nil {
				fail("errors: ref %v, sut %v", errA, errB)
			}
		}
	}
}

type boundKey struct {
	name string
	rule gale.Rule
}

// randomKeys binds each key to one rule (a key never changes strategy: the
// engine puts the rule's identity into its keys).
func randomKeys(rng *rand.Rand, run string) []boundKey {
	var keys []boundKey
	add := func(r gale.Rule) {
		if err := r.Validate(); err != nil {
			panic(err) // a bug in this generator
		}
		keys = append(keys, boundKey{fmt.Sprintf("%s/%d/%v", run, len(keys), r.Algorithm), r})
	}
	periods := []time.Duration{time.Microsecond * 7, time.Millisecond, time.Second, 3 * time.Second, time.Minute, 90 * time.Minute, 24 * time.Hour, 30 * 24 * time.Hour}
	limits := []int64{1, 2, 3, 7, 10, 100, 1000, 1 << 30}
	for _, a := range []gale.Algorithm{gale.FixedWindow, gale.SlidingWindow, gale.GCRA, gale.TokenBucket} {
		for i := 0; i < 3; i++ {
			r := gale.Rule{Algorithm: a, Limit: limits[rng.IntN(len(limits))], Period: periods[rng.IntN(len(periods))]}
			if a == gale.GCRA || a == gale.TokenBucket {
				r.Burst = rng.Int64N(2 * r.Limit)
				if r.Burst > gale.MaxLimit {
					r.Burst = gale.MaxLimit
				}
			}
			add(r)
		}
	}
	for c := gale.Day; c <= gale.Year; c++ {
		add(gale.Rule{Algorithm: gale.Quota, Limit: limits[rng.IntN(4)+2], Calendar: c})
	}
	return keys
}

func randomCost(rng *rand.Rand, r gale.Rule) int64 {
	c := r.Capacity()
	switch x := rng.IntN(10); {
	case x < 6:
		return 1 + rng.Int64N(min(c, 3))
	case x < 9:
		return 1 + rng.Int64N(c)
	default:
		return c + 1 + rng.Int64N(2)
	}
}

// spanOf is the rule's characteristic time: its period, or a day for quotas.
func spanOf(r gale.Rule) time.Duration {
	if r.Algorithm == gale.Quota {
		return 24 * time.Hour
	}
	return r.Period
}

func sameDecision(a, b gale.Decision) bool {
	return a.Allowed == b.Allowed && a.Limit == b.Limit && a.Remaining == b.Remaining &&
		a.ResetAt.Equal(b.ResetAt) && a.RetryAfter == b.RetryAfter && a.Fallback == b.Fallback
}

func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}
