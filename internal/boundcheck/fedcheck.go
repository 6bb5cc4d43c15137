package boundcheck

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// FedResult is one federated schedule checked.
type FedResult struct {
	Schedule   FedSchedule
	Violations []Violation
}

// Failed reports whether a window broke its row.
func (r FedResult) Failed() bool { return len(r.Violations) > 0 }

// RunFederation plays sc on parts from b and judges it.
func RunFederation(ctx context.Context, sc FedSchedule, b FedBackends, key string) (FedResult, error) {
	told, err := PlayFederation(ctx, sc, b, key)
	if err != nil {
		return FedResult{Schedule: sc}, err
	}
	return FedResult{Schedule: sc, Violations: JudgeFederation(sc, told)}, nil
}

// ShrinkFederation returns a schedule as small as it can find that still
// breaks the row r broke (same row, same kind): it removes chunks of
// steps, halving down to single ones, then cuts, regions and processes
// one at a time, then sets clocks' skews to none, and goes round again
// while any of it helped. run plays a candidate.
func ShrinkFederation(ctx context.Context, r FedResult, run func(FedSchedule) (FedResult, error)) (FedResult, error) {
	want := r.Violations[0]
	best := r
	try := func(sc FedSchedule) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		c, err := run(sc)
		if err != nil {
			return false, nil // a candidate the fleet cannot run is not smaller
		}
		i := slices.IndexFunc(c.Violations, func(v Violation) bool { return v.Row == want.Row && v.Safety == want.Safety })
		if i < 0 {
			return false, nil
		}
		c.Violations[0], c.Violations[i] = c.Violations[i], c.Violations[0] // the one described
		best = c
		return true, nil
	}
	// each tries the candidates edit makes from best, in turn, keeping
	// those that still fail.
	each := func(edit func(sc FedSchedule, i int) (FedSchedule, bool)) (bool, error) {
		shrunk := false
		for i := 0; ; {
			cand, ok := edit(best.Schedule, i)
			if !ok {
				return shrunk, nil
			}
			got, err := try(cand)
			if err != nil {
				return shrunk, err
			}
			if got {
				shrunk = true
				continue // i now names what came after
			}
			i++
		}
	}
	for again := true; again; {
		again = false
		for chunk := len(best.Schedule.Steps) / 2; chunk >= 1; chunk /= 2 {
			got, err := each(func(sc FedSchedule, i int) (FedSchedule, bool) {
				at := i * chunk
				if at >= len(sc.Steps) || len(sc.Steps) <= 1 {
					return sc, false
				}
				out := sc
				out.Steps = slices.Delete(slices.Clone(sc.Steps), at, min(at+chunk, len(sc.Steps)))
				return out, len(out.Steps) > 0
			})
			if err != nil {
				return best, err
			}
			again = again || got
		}
		for _, edit := range []func(FedSchedule, int) (FedSchedule, bool){withoutCut, withoutRegion, withoutProc, withoutSkew} {
			got, err := each(edit)
			if err != nil {
				return best, err
			}
			again = again || got
		}
	}
	return best, nil
}

// withoutCut is sc less its i-th cut.
func withoutCut(sc FedSchedule, i int) (FedSchedule, bool) {
	if i >= len(sc.Cuts) {
		return sc, false
	}
	sc.Cuts = slices.Delete(slices.Clone(sc.Cuts), i, i+1)
	return sc, true
}

// withoutRegion is sc less its i-th region (while it has two), its checks
// and its place in the cuts.
func withoutRegion(sc FedSchedule, i int) (FedSchedule, bool) {
	if i >= len(sc.Spec.Regions) || len(sc.Spec.Regions) == 1 {
		return sc, false
	}
	out := sc
	out.Spec.Regions = slices.Delete(slices.Clone(sc.Spec.Regions), i, i+1)
	out.Steps = nil
	for _, c := range sc.Steps {
		if c.Region == i {
			continue
		}
		if c.Region > i {
			c.Region--
		}
		out.Steps = append(out.Steps, c)
	}
	out.Cuts = nil
	low := uint8(1)<<i - 1
	for _, c := range sc.Cuts {
		c.Regions = c.Regions&low | c.Regions>>1&^low
		if c.Regions != 0 {
			out.Cuts = append(out.Cuts, c)
		}
	}
	return out, len(out.Steps) > 0
}

// withoutProc is sc less one process (the i-th of the fleet, region by
// region, in a region that has two) and its checks.
func withoutProc(sc FedSchedule, i int) (FedSchedule, bool) {
	for r, reg := range sc.Spec.Regions {
		if i >= len(reg.Procs) {
			i -= len(reg.Procs)
			continue
		}
		if len(reg.Procs) == 1 {
			return withoutProc(sc, i+1+procsBefore(sc, r)) // this one cannot go: the next
		}
		out := sc
		out.Spec.Regions = slices.Clone(sc.Spec.Regions)
		out.Spec.Regions[r].Procs = slices.Delete(slices.Clone(reg.Procs), i, i+1)
		out.Steps = nil
		for _, c := range sc.Steps {
			if c.Region == r && c.Proc == i {
				continue
			}
			if c.Region == r && c.Proc > i {
				c.Proc--
			}
			out.Steps = append(out.Steps, c)
		}
		return out, len(out.Steps) > 0
	}
	return sc, false
}

func procsBefore(sc FedSchedule, r int) int {
	n := 0
	for _, reg := range sc.Spec.Regions[:r] {
		n += len(reg.Procs)
	}
	return n
}

// withoutSkew is sc with the i-th skewed clock (regions' and processes',
// region by region) set to the coordinator's.
func withoutSkew(sc FedSchedule, i int) (FedSchedule, bool) {
	for r, reg := range sc.Spec.Regions {
		clocks := append([]time.Duration{reg.Skew}, reg.Procs...)
		for j, d := range clocks {
			if d == 0 {
				continue
			}
			if i > 0 {
				i--
				continue
			}
			out := sc
			out.Spec.Regions = slices.Clone(sc.Spec.Regions)
			if j == 0 {
				out.Spec.Regions[r].Skew = 0
			} else {
				out.Spec.Regions[r].Procs = slices.Clone(reg.Procs)
				out.Spec.Regions[r].Procs[j-1] = 0
			}
			return out, true
		}
	}
	return sc, false
}

// DescribeFederation is a failing result for a person: the row, the
// window, what broke, and the schedule, in words and as Go.
func DescribeFederation(r FedResult) string {
	return fmt.Sprintf("%v\n%v%#v\n", r.Violations[0], r.Schedule, r.Schedule)
}
