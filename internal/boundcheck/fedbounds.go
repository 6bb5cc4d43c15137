package boundcheck

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale/federation"
)

// FederationRows are the bounds table's federated rows as the checker
// judges them (issue 40): every window of the coordinator's clock is
// judged by the row of its case — no outage touches it, every region is
// cut off from the coordinator for all of it, or an outage touches part of
// it — from what the processes' callers were told. Held and Slack are nil:
// JudgeFederation figures a window's bound from the schedule's regions and
// cuts.
var FederationRows = map[string]Row{
	"federated": {Name: "federated",
		Most: "at most the limit L in a coordinator window no outage touches, for any number of regions and processes and any skew of their clocks: " +
			"grants die at the coordinator's window end on every clock (a process's credits by their time to live from its lease, an escrow's balance from the take before it). " +
			"An outage touches a window from its start until ProbeAfter past its end, while a region that saw it still answers by its outage mode",
		Least: "a steady window no outage touches (checks of one unit): at least min(asked, L) less what may be stranded once the coordinator's budget is spent: " +
			"on each process its batch less one (the credits it kept of its last lease), in each escrow its region batch less the process batch (a lease's surplus)"},
	"outage_whole": {Name: "federated, every region cut off for the whole window",
		Most: "at most Σ regional_limit of the regional_only regions: the coordinator grants nothing in the window, and what it granted before died with its own window (escrow balances included); " +
			"a fail_closed region admits nothing beyond what was granted before",
		Least: "not judged: a fail_closed region admits nothing by design, and a regional budget is the region's to share among its processes as their leases fall"},
	"outage_part": {Name: "federated, outage over part of the window",
		Most: "at most L + Σ regional_limit of the regional_only regions the outage touches: " +
			"the coordinator's L, granted before, after or to regions it did not cut off, and each regional budget once",
		Least: "not judged: as the whole-window row, while any region is in outage"},
}

// windowBound is a window's row and the most it may admit.
type windowBound struct {
	row  string
	most int64
	why  string
}

// bound is window w's case: which row judges it, and its most.
func (sc FedSchedule) bound(w int) windowBound {
	from, to := time.Duration(w)*Window, time.Duration(w+1)*Window
	whole := true
	var touched []int
	var regional int64
	for r, reg := range sc.Spec.Regions {
		var spans []Cut
		hit := false
		for _, c := range sc.Cuts {
			if c.Regions&(1<<r) == 0 || c.To <= c.From {
				continue
			}
			spans = append(spans, c)
			hit = hit || c.From < to && from < c.To+sc.Spec.ProbeAfter
		}
		whole = whole && covers(spans, from, to)
		if hit {
			touched = append(touched, r)
			if reg.Outage == federation.RegionalOnly {
				regional += reg.RegionalLimit
			}
		}
	}
	switch {
	case whole:
		return windowBound{"outage_whole", regional, fmt.Sprintf("every region cut off from the coordinator for the whole window: Σ regional_limit = %d", regional)}
	case len(touched) > 0:
		return windowBound{"outage_part", sc.Spec.Limit + regional, fmt.Sprintf("regions %v in outage in the window: L %d + Σ regional_limit %d", touched, sc.Spec.Limit, regional)}
	}
	return windowBound{"federated", sc.Spec.Limit, "no outage: L"}
}

// covers reports whether spans cover [from, to).
func covers(spans []Cut, from, to time.Duration) bool {
	slices.SortFunc(spans, func(a, b Cut) int { return cmp.Compare(a.From, b.From) })
	at := from
	for _, s := range spans {
		if s.From > at {
			break
		}
		at = max(at, s.To)
	}
	return at >= to
}

// stranded is what a steady window may leave unused once the
// coordinator's budget is spent: what a process kept of its last lease
// (at most its batch less the unit the check that leased it took), and
// what an escrow kept of a coordinator grant's surplus (at most the region
// batch less the process batch it was asked with: a refill joins only a
// balance a take found empty).
func (sp FedSpec) stranded() int64 {
	var n int64
	for _, reg := range sp.Regions {
		n += int64(len(reg.Procs)) * (reg.ProcBatch - 1)
		if reg.Escrow {
			n += max(0, reg.Batch-reg.ProcBatch)
		}
	}
	return n
}

// JudgeFederation judges every window of the coordinator's clock by its
// row of FederationRows, from what the clients were told (told[i] for
// check i): the units admitted in it, each counted in the window of the
// coordinator's clock its check was made at.
func JudgeFederation(sc FedSchedule, told []Told) []Violation {
	n := 1
	if len(sc.Steps) > 0 {
		n = int(sc.Steps[len(sc.Steps)-1].At/Window) + 1
	}
	asked, admitted := make([]int64, n), make([]int64, n)
	first := make([]int, n) // the window's first check
	for i := len(sc.Steps) - 1; i >= 0; i-- {
		c := sc.Steps[i]
		if c.Kind != FedCheck {
			continue
		}
		w := int(c.At / Window)
		first[w] = i
		asked[w] += c.Cost
		if told[i].Admitted {
			admitted[w] += c.Cost
		}
	}
	var out []Violation
	for w := range n {
		b := sc.bound(w)
		row := FederationRows[b.row]
		if admitted[w] > b.most {
			out = append(out, Violation{Row: row.Name, Window: w, Safety: true,
				Detail: fmt.Sprintf("admitted %d of %d asked (from check #%d), want at most %d (%s): %s", admitted[w], asked[w], first[w], b.most, b.why, row.Most)})
		}
		if sc.Steady && b.row == "federated" {
			least := min(asked[w], sc.Spec.Limit) - sc.Spec.stranded()
			if admitted[w] < least {
				out = append(out, Violation{Row: row.Name, Window: w,
					Detail: fmt.Sprintf("admitted %d of %d asked, want at least %d: %s", admitted[w], asked[w], least, row.Least)})
			}
		}
	}
	return out
}
