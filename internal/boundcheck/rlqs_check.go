package boundcheck

import (
	"context"
	"fmt"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// RLQSResult is one RLQS schedule checked.
type RLQSResult struct {
	Schedule   RLQSSchedule
	Violations []RLQSViolation
	// Told is what the Envoys were told and decided.
	Told RLQSTold
}

// Failed reports whether a window broke its row.
func (r RLQSResult) Failed() bool { return len(r.Violations) > 0 }

// RunRLQS plays sc on a store from newStore and judges it. domain names
// the run's keys apart (a store shared between runs).
func RunRLQS(ctx context.Context, sc RLQSSchedule, newStore func() gale.Store, domain string) (RLQSResult, error) {
	told, err := PlayRLQS(ctx, sc, newStore(), domain)
	if err != nil {
		return RLQSResult{Schedule: sc}, err
	}
	return RLQSResult{Schedule: sc, Violations: JudgeRLQS(sc, told), Told: told}, nil
}

// ShrinkRLQS returns a schedule as short as it can find that still breaks
// the row r broke (same row, same kind): it ends the schedule with the
// window that broke, removes Envoys one at a time, then chunks of steps,
// halving down to single steps, then sidecars, then Envoys again. fails
// runs a candidate; one that cannot run is not smaller.
func ShrinkRLQS(ctx context.Context, r RLQSResult, fails func(RLQSSchedule) (RLQSResult, error)) (RLQSResult, error) {
	want := r.Violations[0]
	best := r
	try := func(sc RLQSSchedule) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		c, err := fails(sc)
		if err != nil {
			return false, nil
		}
		for _, v := range c.Violations {
			if v.Row == want.Row && v.Safety == want.Safety {
				best = c
				return true, nil
			}
		}
		return false, nil
	}
	if cut := want.To; cut < best.Schedule.Length {
		cand := best.Schedule
		cand.Length = cut
		cand.Steps = nil
		for _, st := range best.Schedule.Steps {
			if st.At < cut {
				cand.Steps = append(cand.Steps, st)
			}
		}
		if _, err := try(cand); err != nil {
			return best, err
		}
	}
	envoys := func() error {
		for e := len(best.Schedule.Envoys) - 1; e >= 0 && len(best.Schedule.Envoys) > 1; e-- {
			if e >= len(best.Schedule.Envoys) {
				continue
			}
			if _, err := try(withoutEnvoy(best.Schedule, e)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := envoys(); err != nil {
		return best, err
	}
	for chunk := len(best.Schedule.Steps) / 2; chunk >= 1; {
		shrunk := false
		for at := 0; at < len(best.Schedule.Steps); {
			cand := best.Schedule
			cand.Steps = append(append([]RLQSStep(nil), cand.Steps[:at]...), cand.Steps[min(at+chunk, len(cand.Steps)):]...)
			got, err := try(cand)
			if err != nil {
				return best, err
			}
			if got {
				shrunk = true
				continue // the same position now holds later steps
			}
			at += chunk
		}
		if !shrunk {
			chunk /= 2
		}
	}
	for best.Schedule.Servers > 1 {
		if got, err := try(withoutServer(best.Schedule, best.Schedule.Servers-1)); err != nil || !got {
			if err != nil {
				return best, err
			}
			break
		}
	}
	if err := envoys(); err != nil {
		return best, err
	}
	return best, nil
}

// withoutEnvoy is sc less Envoy e and its steps; later Envoys move down.
func withoutEnvoy(sc RLQSSchedule, e int) RLQSSchedule {
	out := sc
	out.Envoys = append(append([]int(nil), sc.Envoys[:e]...), sc.Envoys[e+1:]...)
	out.Steps = nil
	for _, st := range sc.Steps {
		if (st.Kind == RLQSRequest || st.Kind == RLQSReset) && st.Envoy == e {
			continue
		}
		if (st.Kind == RLQSRequest || st.Kind == RLQSReset) && st.Envoy > e {
			st.Envoy--
		}
		out.Steps = append(out.Steps, st)
	}
	return out
}

// withoutServer is sc less sidecar s (the last): its Envoys move to
// sidecar 0, its restarts go.
func withoutServer(sc RLQSSchedule, s int) RLQSSchedule {
	out := sc
	out.Servers--
	out.Envoys = nil
	for _, srv := range sc.Envoys {
		if srv == s {
			srv = 0
		}
		out.Envoys = append(out.Envoys, srv)
	}
	out.Steps = nil
	for _, st := range sc.Steps {
		if st.Kind == RLQSRestart && st.Server == s {
			continue
		}
		out.Steps = append(out.Steps, st)
	}
	return out
}

// DescribeRLQS is a failing result for a person: the row, the window,
// what broke, and the schedule to replay and to keep.
func DescribeRLQS(r RLQSResult) string {
	return fmt.Sprintf("%v\n%v\nas a regression:\n%#v", r.Violations[0].Violation, r.Schedule, r.Schedule)
}
