package boundcheck

import (
	"context"
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Result is one schedule checked.
type Result struct {
	Schedule   Schedule
	Violations []Violation
}

// Failed reports whether a window broke its row.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Run plays sc on a store from newStore and judges it. domain names the
// run's keys apart (a store shared between runs).
func Run(ctx context.Context, sc Schedule, newStore func() gale.Store, domain string) (Result, error) {
	told, err := Play(ctx, sc, newStore(), domain)
	if err != nil {
		return Result{Schedule: sc}, err
	}
	return Result{Schedule: sc, Violations: Judge(sc, told)}, nil
}

// Shrink returns a schedule with as few steps and nodes as it can find
// that still breaks the row r broke (same row, same kind), by removing
// chunks of steps, halving down to single steps (a reservation goes with
// its settlement), then nodes. fails runs a candidate.
func Shrink(ctx context.Context, r Result, fails func(Schedule) (Result, error)) (Result, error) {
	want := r.Violations[0]
	same := func(c Result) bool {
		for _, v := range c.Violations {
			if v.Row == want.Row && v.Safety == want.Safety {
				return true
			}
		}
		return false
	}
	best := r
	try := func(sc Schedule) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		c, err := fails(sc)
		if err != nil {
			return false, nil // a candidate the engine refuses is not smaller
		}
		if same(c) {
			best = c
			return true, nil
		}
		return false, nil
	}
	for chunk := len(best.Schedule.Steps) / 2; chunk >= 1; {
		shrunk := false
		for at := 0; at < len(best.Schedule.Steps); {
			cand, ok := without(best.Schedule, at, chunk)
			if ok {
				got, err := try(cand)
				if err != nil {
					return best, err
				}
				if got {
					shrunk = true
					continue // the same position now holds later steps
				}
			}
			at += chunk
		}
		if !shrunk {
			chunk /= 2
		}
	}
	for best.Schedule.Nodes > 1 {
		cand := best.Schedule
		cand.Nodes--
		cand.Steps = nil
		for _, st := range best.Schedule.Steps {
			st.Node = min(st.Node, cand.Nodes-1)
			cand.Steps = append(cand.Steps, st)
		}
		got, err := try(cand)
		if err != nil {
			return best, err
		}
		if !got {
			break
		}
	}
	return best, nil
}

// without is sc less steps [at, at+n), and the settlements of the
// reservations among them; ok is false when nothing is left to remove.
func without(sc Schedule, at, n int) (Schedule, bool) {
	if at >= len(sc.Steps) {
		return sc, false
	}
	drop := map[int]bool{}
	for i := at; i < min(at+n, len(sc.Steps)); i++ {
		drop[i] = true
	}
	for i, st := range sc.Steps {
		if st.Kind == Settle && drop[st.Ref] {
			drop[i] = true
		}
	}
	pos := make([]int, len(sc.Steps))
	out := sc
	out.Steps = nil
	for i, st := range sc.Steps {
		if drop[i] {
			continue
		}
		pos[i] = len(out.Steps)
		if st.Kind == Settle {
			st.Ref = pos[st.Ref]
		}
		out.Steps = append(out.Steps, st)
	}
	return out, len(out.Steps) > 0
}

// Describe is a failing result for a person: the row, the window, what
// broke, and the schedule to replay.
func Describe(r Result) string {
	return fmt.Sprintf("%v\n%v", r.Violations[0], r.Schedule)
}
