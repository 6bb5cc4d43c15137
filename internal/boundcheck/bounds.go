package boundcheck

import (
	"fmt"
	"slices"
)

// Row is one line of the bounds table: what a counter may count at most
// (safety) and must admit at least (liveness), for a spec.
//
// What a counter counts is what its clients were told they took: the units
// of the checks and reservations admitted, less the refunds that went back
// into it (a reservation settled below its units while the window that
// counted it lasts; a fair rule keeps what it admitted), plus the extra
// charged past reservations (counted in full: the cost was spent). An
// extra cannot be refused, so the count may pass the limit; what a row
// bounds is what is admitted once it has: at most Held, the credits the
// nodes leased before (admitted from them without asking the store), and
// nothing when every admission asks the store.
type Row struct {
	Name string
	// Most is the row's safety bound, in words.
	Most string
	// Least is what the row promises admitted when demand is there, in
	// words ("—": nothing judged).
	Least string
	// Held is what sc's nodes may admit once a counter is past its bound:
	// the credits they hold. nil for a row that bends a mode's row (a
	// restart, a kill, skew, reloads, several limits): the mode's applies.
	Held func(sc Schedule) int64
	// Slack is how many units short of min(asked, limit) a steady window
	// may admit, for n nodes that lived in it (the killed ones too); nil
	// as Held.
	Slack func(sp Spec, n int) int64
}

func none(Schedule) int64 { return 0 }

// batches is what sc's leased nodes hold at most: a batch each (the
// largest any policy of sc gives), or what a check or reservation costing
// more leased for itself, and what a reservation settled below its units
// gave back to the node's credits (a reservation's units at most).
func batches(sc Schedule) int64 {
	most := sc.Spec.Batch
	for _, st := range sc.Steps {
		switch st.Kind {
		case Check, Reserve:
			most = max(most, st.Cost)
		case Reload:
			most = max(most, st.Policy.Batch)
		}
	}
	return int64(sc.Nodes) * most
}

// quanta is what sc's fair escrows hold at most: a lease quantum each, of
// the largest limit the schedule loads (a call costing more leases its
// cost, and takes it all; a fair rule refunds nothing).
func quanta(sc Schedule) int64 {
	limit := sc.Spec.Limits[0].Count
	for _, st := range sc.Steps {
		if st.Kind == Reload {
			limit = max(limit, st.Policy.Limits[0].Count)
		}
	}
	return int64(sc.Nodes) * max(1, limit/20)
}

// heldBy is what a counter's nodes hold, by how it is enforced: its row's
// Held.
func heldBy(sc Schedule, leased bool) int64 {
	switch {
	case sc.Spec.Fair:
		return Rows[rowFair].Held(sc)
	case leased:
		return Rows[rowLeased].Held(sc)
	}
	return 0
}

// stranded is what sc's leased nodes may leave unused in a steady window:
// a batch each.
func stranded(sp Spec, n int) int64 { return int64(n) * sp.Batch }

// strandedQuanta is what sc's fair escrows may leave unused: a quantum each.
func strandedQuanta(sp Spec, n int) int64 { return int64(n) * max(1, sp.Limits[0].Count/20) }

func noSlack(Spec, int) int64 { return 0 }

// slackBy is what a steady window may fall short by: its row's Slack.
func slackBy(sp Spec, n int) int64 {
	if sp.Fair {
		return Rows[rowFair].Slack(sp, n)
	}
	return Rows[modeRow(sp, false)].Slack(sp, n)
}

// The keys of Rows, in the order Table shows them: a mode's rows, then
// the rows that bend them.
const (
	rowStrict       = "01 window/strict"
	rowCachedDeny   = "02 window/cached_deny"
	rowLeased       = "03 window/leased"
	rowFair         = "04 window/fair"
	rowBucketStrict = "05 bucket/strict"
	rowBucketCached = "06 bucket/cached_deny"
	rowBucketLeased = "07 bucket/leased"
	rowSeveral      = "08 several"
	rowReload       = "09 reload"
	rowKill         = "10 kill"
	rowRestart      = "11 restart"
	rowSkew         = "12 skew"
)

// Rows is the bounds table the checker judges by: a row per mode and kind
// of algorithm, and a row for each thing that bends a bound (a store
// restart, a node killed, skewed clocks, reloads, several limits), by
// which a counter that went through it is judged.
var Rows = map[string]Row{
	rowStrict: {Name: "strict: fixed_window, sliding_window", Held: none, Slack: noSlack,
		Most:  "nothing admitted past the limit: each admission fits its window's count as the clients were told it (admitted, extras, less refunds; sliding: plus the last window's, weighted by its overlap)",
		Least: "a steady window admits min(asked, limit); every denial is due: the count as told leaves its cost no room"},
	rowCachedDeny: {Name: "cached_deny: fixed_window, sliding_window", Held: none, Slack: noSlack,
		Most:  "as strict: admissions ask the store",
		Least: "as strict; a remembered denial lasts until its retry-after, so none is judged in a window after a refund, or under skew"},
	rowLeased: {Name: "leased (window-coupled): fixed_window, sliding_window", Held: batches, Slack: stranded,
		Most:  "at most N·max(batch, the largest cost) admitted past the limit (the credits the nodes hold: a batch, a cost leased for itself, a reservation's refund)",
		Least: "a steady window admits min(asked, limit) − N·batch (credits stranded on the nodes)"},
	rowFair: {Name: "fairness (a fixed window shared by tenants)", Held: quanta, Slack: strandedQuanta,
		Most:  "at most N·quantum admitted past the limit (quantum = max(1, limit/20): what each escrow holds)",
		Least: "a steady window admits min(asked, limit) − N·quantum"},
	rowBucketStrict: {Name: "strict: gcra, token_bucket", Held: none, Slack: noSlack,
		Most:  "one bucket, exactly (in µs): over any [a, b] ending at an admission, admitted + extras − refunds ≤ B + rate·(b − a), B the largest burst in force over it, the rate the fastest that may have refilled it (a reload's figures are read into a state since its last write)",
		Least: "every denial is due: some [a, t] leaves its cost no room at the slowest rate that may have refilled it, short 1 µs per store operation (the strategies' rounding)"},
	rowBucketCached: {Name: "cached_deny: gcra, token_bucket", Held: none, Slack: noSlack,
		Most:  "one bucket, as strict",
		Least: "as strict, until a refund"},
	rowBucketLeased: {Name: "leased (decaying credits): gcra, token_bucket", Held: batches, Slack: noSlack,
		Most:  "one bucket, exactly; once an extra was charged or the store restarted, the admissions (extras left out: they take from what the bucket grants) may pass it by N·max(batch, the largest cost), the credits the nodes hold past the bucket",
		Least: "—"},
	rowSeveral: {Name: "several limits on one descriptor",
		Most:  "each limit's counter by its own row: a request admitted counts on all its limits, one denied on none",
		Least: "strict, cached_deny: every denial is due to a limit with no room: a denial by one consumes nothing of the others"},
	rowReload: {Name: "reloads that rename, reorder, move between modes or re-count a limit",
		Most:  "a renamed, reordered or moved limit keeps its count, judged by its row and the figures in force; a new period or algorithm is another counter, judged from its first unit",
		Least: "as the row in force"},
	rowKill: {Name: "a node killed (dropped: nothing it holds goes back) or stopped (closed: its credits go back), a new one in its place",
		Most:  "the mode's row: a killed node's credits are lost, never doubled",
		Least: "a steady window admits min(asked, limit) less what each node that lived in it holds (the killed ones too)"},
	rowRestart: {Name: "a store restart, empty (Redis without persistence), every mode",
		Most:  "≤ Limit + C, C what the store had counted in the window when it died: the count starts over at the restart, judged by the mode's row from there (leased: the credits nodes kept are its Held, and a sliding window's next may weigh its count without them); a bucket starts full",
		Least: "as the mode's, but no denial judged after it (strict keeps the denials it was given across a restart it sees)"},
	rowSkew: {Name: "clock skew between nodes (windowed limits on callers' clocks: the memory store, Redis without server time)",
		Most:  "strict, cached_deny: the mode's row per window of the store, a stamp older than the newest window the store counted in counted in that one; leased, fair: what is admitted stamped in windows W and later, less refunds, ≤ those windows' limits (credits die at their window's end on the node's clock)",
		Least: "strict: every denial due in the store's window; cached_deny: not judged"},
}

// modeRow is the key of the row a counter's mode and algorithm is judged
// by.
func modeRow(sp Spec, bucket bool) string {
	switch {
	case sp.Fair:
		return rowFair
	case bucket:
		return map[Mode]string{Strict: rowBucketStrict, CachedDeny: rowBucketCached, Leased: rowBucketLeased}[sp.Mode]
	}
	return map[Mode]string{Strict: rowStrict, CachedDeny: rowCachedDeny, Leased: rowLeased}[sp.Mode]
}

// Violation is a counter that broke its row.
type Violation struct {
	Row    string // the row's Name
	Window int    // the Window (of the schedule's, on the true clock) it broke in
	Step   int    // the step that broke it (-1: a window's whole)
	Safety bool   // the most (false: the least)
	Detail string
}

func (v Violation) String() string {
	kind := "least"
	if v.Safety {
		kind = "most"
	}
	if v.Step < 0 {
		return fmt.Sprintf("%s, window %d, %s: %s", v.Row, v.Window, kind, v.Detail)
	}
	return fmt.Sprintf("%s, window %d, step #%d, %s: %s", v.Row, v.Window, v.Step, kind, v.Detail)
}

// Judge judges every counter of sc by its row, from what the clients were
// told (told[i] for step i): what each counted is what was admitted (the
// checks' and reservations' costs), less the refunds that went back into
// it, plus the extra settled in it; a request admitted counts on every
// limit of its descriptor, and one denied on none. A fair rule's limit is
// one counter its tenants share; any other limit's is a counter per
// tenant (the descriptor's value), each judged alone. A denial a strict or
// cached_deny rule gave is judged due if one of the request's counters had
// no room for it.
func Judge(sc Schedule, told []Told) []Violation {
	var out []Violation
	due := map[int]*dueness{}
	for _, h := range histories(sc, told) {
		if h.key.bucket() {
			out = append(out, judgeBucket(sc, h, due)...)
		} else {
			out = append(out, judgeWindows(sc, h, due)...)
		}
	}
	var undue []int
	for step, d := range due {
		if d.judged && !d.due {
			undue = append(undue, step)
		}
	}
	if len(undue) > 0 {
		slices.Sort(undue)
		st := sc.Steps[undue[0]]
		row := Rows[due[undue[0]].row].Name
		out = append(out, Violation{Row: row, Step: undue[0],
			Detail: fmt.Sprintf("%d denials no limit was due, the first %v: %s", len(undue), st, due[undue[0]].why)})
	}
	for i, v := range out {
		if v.Step >= 0 {
			out[i].Window = int(sc.Steps[v.Step].At / Window)
		}
	}
	return out
}

// dueness is what a denied step's counters said of it.
type dueness struct {
	judged bool   // every counter of the request could tell
	due    bool   // one had no room for it
	row    string // the key of the row a denial is judged by
	why    string // what the counters held, for an undue one
}

// note records what one counter said of denied step i: can it tell, and
// had it room.
func (d *dueness) note(can, due bool, why string) {
	d.judged = d.judged && can
	d.due = d.due || due
	if !due && d.why == "" {
		d.why = why
	}
}

func dueOf(due map[int]*dueness, i int, row string) *dueness {
	d := due[i]
	if d == nil {
		d = &dueness{judged: true, row: row}
		due[i] = d
	}
	return d
}

// floorDiv is ⌊a / b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
