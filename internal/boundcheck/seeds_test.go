package boundcheck

import (
	"fmt"
	"testing"
	"time"
)

// played is what a checker made of one seed, for checkSeeds.
type played struct {
	steps      int
	violations []Violation
	// cause, when set, names what a violation's breaking needed (a
	// survey's key: federation's diagnose).
	cause func(Violation) string
	// differs, when not empty, says the schedule was told differently on
	// the store it was played on again.
	differs string
	// shrink shrinks the failing schedule and says so: how many steps it
	// had, how many are left, and the small schedule to replay.
	shrink func() string
}

// checkSeeds plays n seeds from from through play and fails on the first
// that breaks its rows, shrunk; with -survey it goes on, and reports each
// row and kind broken (once per schedule), how often, and the first seed.
// It logs progress every 30 s and what it ran at the end.
func checkSeeds(t *testing.T, from, n uint64, play func(seed uint64) (played, error)) {
	began, last := time.Now(), time.Now()
	steps := 0
	found, first := map[string]int{}, map[string]string{}
	var order []string
	defer func() {
		for _, key := range order {
			t.Errorf("%s broken in %d of %d schedules; the first: %s", key, found[key], n, first[key])
		}
	}()
	count := func(key, what string) {
		if found[key] == 0 {
			first[key] = what
			order = append(order, key)
		}
		found[key]++
	}
	for seed := from; seed < from+n; seed++ {
		p, err := play(seed)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		steps += p.steps
		if p.differs != "" {
			if !*survey {
				t.Fatalf("seed %d: %s", seed, p.differs)
			}
			count("told the same", fmt.Sprintf("seed %d: %s", seed, p.differs))
		}
		if len(p.violations) > 0 && *survey {
			seen := map[string]bool{}
			for _, v := range p.violations {
				key := fmt.Sprintf("%s (safety %v)", v.Row, v.Safety)
				if p.cause != nil {
					key = fmt.Sprintf("%s (safety %v; %s)", v.Row, v.Safety, p.cause(v))
				}
				if !seen[key] { // a schedule counts once per row
					seen[key] = true
					count(key, fmt.Sprintf("seed %d: %v", seed, v))
				}
			}
			continue
		}
		if len(p.violations) > 0 {
			t.Fatalf("seed %d broke the bounds table %s", seed, p.shrink())
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			t.Logf("%d of %d schedules (seeds %d..%d), %d steps, in %v", seed-from+1, n, from, seed, steps, time.Since(began).Round(time.Second))
		}
	}
	t.Logf("%d schedules clean (seeds %d..%d), %d steps, in %v", n, from, from+n-1, steps, time.Since(began).Round(time.Millisecond))
}
