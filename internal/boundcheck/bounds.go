package boundcheck

import (
	"fmt"
	"time"
)

// Row is one line of the bounds table: what a window may count at most
// (safety) and must admit at least (work conservation), for a spec.
//
// What a window counts is what its clients were told they took: the
// units of the checks and reservations admitted in it, less the refunds
// that went back into it, plus the extra charged in it past reservations
// (counted in full: the cost was spent). An extra cannot be refused, so
// the count may pass the limit; what the row bounds is what is admitted
// once it has: at most Held, the credits the nodes leased before
// (admitted from them without asking the store), and nothing when every
// admission asks the store. So a window counts at most its limit, plus the
// extra charged after its last admission within the limit, plus Held.
type Row struct {
	Name string
	// Most is the row's safety bound, in words.
	Most string
	// Least is the least a steady window (w ≥ 1) must admit of what was
	// asked, in words.
	Least string
	// Held is what sc's nodes may admit once the window's count is past
	// its limit: the credits they hold.
	Held func(sc Schedule) int64
	// Slack is how many units short of min(asked, limit) a steady window
	// may admit, for n nodes.
	Slack func(sp Spec, n int) int64
}

func none(Schedule) int64 { return 0 }

// batches is what sc's leased nodes hold at most: a batch each, or what a
// check or reservation costing more leased for itself, and what a
// reservation settled below its units gave back to the node's credits (a
// reservation's units at most).
func batches(sc Schedule) int64 {
	most := sc.Spec.Batch
	for _, st := range sc.Steps {
		if st.Kind == Check || st.Kind == Reserve {
			most = max(most, st.Cost)
		}
	}
	return int64(sc.Nodes) * most
}

// quanta is what sc's fair escrows hold at most: a lease quantum each, of
// the largest limit the schedule loads (a call costing more leases its
// cost, and takes it all; a fair rule refunds nothing).
func quanta(sc Schedule) int64 {
	limit := sc.Spec.Limit
	for _, st := range sc.Steps {
		if st.Kind == Reload {
			limit = max(limit, st.Cost)
		}
	}
	return int64(sc.Nodes) * max(1, limit/20)
}

// stranded is what sc's leased nodes may leave unused in a steady window:
// a batch each.
func stranded(sp Spec, n int) int64 { return int64(n) * sp.Batch }

// strandedQuanta is what sc's fair escrows may leave unused: a quantum each.
func strandedQuanta(sp Spec, n int) int64 { return int64(n) * max(1, sp.Limit/20) }

func noSlack(Spec, int) int64 { return 0 }

// Rows is the bounds table the checker judges by, one row per mode; a
// fair rule has its own.
var Rows = map[string]Row{
	"strict": {Name: "strict", Held: none, Slack: noSlack,
		Most:  "nothing admitted once the window's count is past its limit",
		Least: "min(asked, limit)"},
	"cached_deny": {Name: "cached_deny", Held: none, Slack: noSlack,
		Most:  "nothing admitted once the window's count is past its limit",
		Least: "min(asked, limit)"},
	"leased": {Name: "leased (window-coupled)", Held: batches, Slack: stranded,
		Most:  "at most N·max(batch, the largest cost) admitted once the window's count is past its limit (the credits the nodes hold: a batch, a cost leased for itself, a reservation's refund)",
		Least: "min(asked, limit) − N·batch (credits stranded on the nodes)"},
	"fair": {Name: "fairness", Held: quanta, Slack: strandedQuanta,
		Most:  "at most N·quantum admitted once the window's count is past its limit (quantum = max(1, limit/20): what each escrow holds)",
		Least: "min(asked, limit) − N·quantum"},
}

// RowOf is the row a spec is judged by.
func RowOf(sp Spec) Row {
	if sp.Fair {
		return Rows["fair"]
	}
	return Rows[string(sp.Mode)]
}

// Violation is a window that broke its row.
type Violation struct {
	Row    string
	Window int
	Safety bool // the most (false: the least)
	Detail string
}

func (v Violation) String() string {
	kind := "least"
	if v.Safety {
		kind = "most"
	}
	return fmt.Sprintf("%s, window %d, %s: %s", v.Row, v.Window, kind, v.Detail)
}

// Judge judges every window of sc by its row, from what the clients were
// told (told[i] for step i): what each window counted is what was admitted
// in it (checks' costs, reservations), less the refunds that went back into
// it (a reservation settled below its units in its own window; a fair rule
// keeps what it admitted), plus the extra settled in it. A fair rule's
// limit is one counter its tenants share; any other rule's is a counter
// per tenant (the descriptor's value), each judged alone.
func Judge(sc Schedule, told []Told) []Violation {
	if sc.Spec.Fair {
		return judgeCounter(sc, told, func(Step) bool { return true }, "")
	}
	var out []Violation
	seen := map[string]bool{}
	for _, st := range sc.Steps {
		if st.Kind == Reload || st.Kind == Settle || seen[st.Tenant] {
			continue
		}
		seen[st.Tenant] = true
		tenant := st.Tenant
		out = append(out, judgeCounter(sc, told, func(s Step) bool {
			if s.Kind == Settle {
				s = sc.Steps[s.Ref]
			}
			return s.Kind == Reload || s.Tenant == tenant
		}, " tenant "+tenant)...)
	}
	return out
}

// judgeCounter judges the counter of the steps mine keeps.
func judgeCounter(sc Schedule, told []Told, mine func(Step) bool, which string) []Violation {
	row := RowOf(sc.Spec)
	n := 1
	if len(sc.Steps) > 0 {
		n = int(sc.Steps[len(sc.Steps)-1].At/Window) + 1
	}
	counted := make([]int64, n)  // the window's count as its clients were told
	over := make([]int64, n)     // admitted once the count was past the limit in force
	firstOver := make([]int, n)  // the step of the first such admission
	asked := make([]int64, n)    // checks' and reservations' units asked
	admitted := make([]int64, n) // of them, admitted
	reloaded := make([]bool, n)
	most := make([]int64, n) // the most limit in force in the window
	limit := sc.Spec.Limit
	for w := range most {
		most[w] = limit
	}
	win := func(at time.Duration) int { return int(at / Window) }
	for i, st := range sc.Steps {
		if !mine(st) {
			continue
		}
		w := win(st.At)
		switch st.Kind {
		case Reload:
			limit = st.Cost
			reloaded[w] = true
			most[w] = max(most[w], limit)
			for v := w + 1; v < n; v++ {
				most[v] = limit
			}
		case Check, Reserve:
			asked[w] += st.Cost
			if !told[i].Admitted {
				continue
			}
			if counted[w]+st.Cost > limit {
				if over[w] == 0 {
					firstOver[w] = i
				}
				over[w] += st.Cost
			}
			counted[w] += st.Cost
			admitted[w] += st.Cost
		case Settle:
			if !told[i].Admitted {
				continue
			}
			r := sc.Steps[st.Ref]
			switch {
			case st.Cost < r.Cost && win(r.At) == w && !sc.Spec.Fair:
				counted[w] -= r.Cost - st.Cost
			case st.Cost > r.Cost:
				counted[w] += st.Cost - r.Cost
			}
		}
	}
	var out []Violation
	for w := range n {
		if held := row.Held(sc); over[w] > held {
			out = append(out, Violation{Row: row.Name, Window: w, Safety: true,
				Detail: fmt.Sprintf("%s %d units admitted once the count was past the limit (from step #%d), want at most %d: %s; the window counted %d",
					which, over[w], firstOver[w], held, row.Most, counted[w])})
		}
		if !sc.Steady || w == 0 || reloaded[w] || reloaded[w-1] {
			continue
		}
		least := min(asked[w], most[w]) - row.Slack(sc.Spec, sc.Nodes)
		if admitted[w] < least {
			out = append(out, Violation{Row: row.Name, Window: w,
				Detail: fmt.Sprintf("%s admitted %d of %d asked, want at least %d = %s", which, admitted[w], asked[w], least, row.Least)})
		}
	}
	return out
}
