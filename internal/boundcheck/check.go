package boundcheck

import (
	"context"
	"fmt"
	"slices"
)

// Result is one schedule checked.
type Result struct {
	Schedule   Schedule
	Violations []Violation
}

// Failed reports whether a window broke its row.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Run plays sc on a store from b and judges it. domain names the run's
// keys apart (a store shared between runs).
func Run(ctx context.Context, sc Schedule, b Backend, domain string) (Result, error) {
	told, err := Play(ctx, sc, b, domain)
	if err != nil {
		return Result{Schedule: sc}, err
	}
	return Result{Schedule: sc, Violations: Judge(sc, told)}, nil
}

// Shrink returns a schedule with as few steps, nodes and limits as it can
// find that still breaks the row r broke (same row, same kind), by
// removing chunks of steps, halving down to single steps (a reservation
// goes with its settlement), then nodes, the skew, and limits (from every
// policy of the schedule). fails runs a candidate.
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
		if cand.Skew != nil {
			cand.Skew = cand.Skew[:cand.Nodes]
		}
		got, err := try(cand)
		if err != nil {
			return best, err
		}
		if !got {
			break
		}
	}
	if best.Schedule.Skew != nil {
		cand := best.Schedule
		cand.Skew = nil
		if _, err := try(cand); err != nil {
			return best, err
		}
	}
	for i := 0; i < len(best.Schedule.Spec.Limits); {
		cand, ok := withoutCounter(best.Schedule, best.Schedule.Spec.Limits[i].Counter())
		if ok {
			got, err := try(cand)
			if err != nil {
				return best, err
			}
			if got {
				continue
			}
		}
		i++
	}
	return best, nil
}

// withoutCounter is sc with no limit counting in c, in any of its
// policies; ok is false when a policy would be left with none.
func withoutCounter(sc Schedule, c Counter) (Schedule, bool) {
	drop := func(sp Spec) (Spec, bool) {
		sp.Limits = slices.DeleteFunc(slices.Clone(sp.Limits), func(l Limit) bool { return l.Counter() == c })
		return sp, len(sp.Limits) > 0
	}
	out := sc
	var ok bool
	if out.Spec, ok = drop(sc.Spec); !ok {
		return sc, false
	}
	out.Steps = slices.Clone(sc.Steps)
	for i, st := range out.Steps {
		if st.Kind == Reload {
			sp, ok := drop(*st.Policy)
			if !ok {
				return sc, false
			}
			out.Steps[i].Policy = &sp
		}
	}
	return out, true
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

// Describe is a failing result for a person: the row, the step, what
// broke, the schedule to replay, and the schedule as Go source for
// regress_test.go.
func Describe(r Result) string {
	return fmt.Sprintf("%v\n%v\n%s", r.Violations[0], r.Schedule, r.Schedule.Literal())
}
