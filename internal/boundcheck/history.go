package boundcheck

import (
	"fmt"
	"slices"
)

// counterKey names a counter the schedule's clients used: a tenant's
// (the descriptor's value; "" for a fair rule's, which its tenants share)
// in one of the schedule's counters.
type counterKey struct {
	Tenant string
	Counter
}

func (k counterKey) bucket() bool { return k.Algorithm == GCRA || k.Algorithm == TokenBucket }

func (k counterKey) String() string {
	s := fmt.Sprintf("%s/%v", k.Algorithm, k.Period)
	if k.Tenant != "" {
		s = "tenant " + k.Tenant + " " + s
	}
	return s
}

type evKind uint8

const (
	evTake    evKind = iota // a check or reservation admitted
	evDeny                  // a check or reservation denied
	evExtra                 // a settlement's extra, charged
	evRefund                // a settlement's refund
	evReload                // new figures (limit; Count 0: not in the policy), maybe moved
	evKill                  // a node killed or stopped
	evRestart               // the store restarted
)

// event is one thing that happened to a counter, in step order.
type event struct {
	kind  evKind
	step  int
	at    int64 // µs since Start: the step's stamp (evReload, evKill, evRestart: the true clock)
	units int64
	limit Limit // the counter's figures in force (Count 0: none)
	spec  *Spec // the policy in force
	res   int   // evRefund: the reservation's step
	moved bool  // evReload: the limit was renamed, reordered, moved between modes or re-counted
}

// history is one counter's events.
type history struct {
	key    counterKey
	events []event
}

// histories are the events of every counter sc's clients used, in step
// order.
func histories(sc Schedule, told []Told) []*history {
	specs := []*Spec{&sc.Spec}
	counters := map[Counter]bool{}
	var order []Counter
	for _, st := range sc.Steps {
		if st.Kind == Reload {
			specs = append(specs, st.Policy)
		}
	}
	for _, sp := range specs {
		for _, l := range sp.Limits {
			if c := l.Counter(); !counters[c] {
				counters[c] = true
				order = append(order, c)
			}
		}
	}
	var tenants []string
	seen := map[string]bool{}
	for _, st := range sc.Steps {
		if (st.Kind == Check || st.Kind == Reserve) && !seen[st.Tenant] && !sc.Spec.Fair {
			seen[st.Tenant] = true
			tenants = append(tenants, st.Tenant)
		}
	}
	if sc.Spec.Fair {
		tenants = []string{""}
	}
	byKey := map[counterKey]*history{}
	var out []*history
	for _, t := range tenants {
		for _, c := range order {
			h := &history{key: counterKey{t, c}}
			byKey[h.key] = h
			out = append(out, h)
		}
	}
	tenantOf := func(st Step) string {
		if sc.Spec.Fair {
			return ""
		}
		return st.Tenant
	}
	figures := func(sp *Spec, c Counter) Limit {
		for _, l := range sp.Limits {
			if l.Counter() == c {
				return l
			}
		}
		return Limit{Algorithm: c.Algorithm, Period: c.Period}
	}
	each := func(sp *Spec, tenant string, ev event) {
		for _, l := range sp.Limits {
			ev.limit = l
			h := byKey[counterKey{tenant, l.Counter()}]
			h.events = append(h.events, ev)
		}
	}
	cur := &sc.Spec
	specAt := make([]*Spec, len(sc.Steps))
	for _, h := range out { // the figures at the start
		h.events = append(h.events, event{kind: evReload, step: -1, limit: figures(cur, h.key.Counter), spec: cur})
	}
	for i, st := range sc.Steps {
		specAt[i] = cur
		ev := event{step: i, at: floorDiv(int64(sc.stampOf(i)), 1000), spec: cur} // as time.UnixMicro reads it
		switch st.Kind {
		case Check, Reserve:
			ev.kind, ev.units = evDeny, st.Cost
			if told[i].Admitted {
				ev.kind = evTake
			}
			each(cur, tenantOf(st), ev)
		case Settle:
			if !told[i].Admitted {
				continue
			}
			r := sc.Steps[st.Ref]
			if told[i].Extra > 0 {
				ev.kind, ev.units = evExtra, told[i].Extra
				each(cur, tenantOf(r), ev)
			}
			if told[i].Refunded > 0 && !specAt[st.Ref].Fair { // a fair rule keeps what it admitted
				ev.kind, ev.units, ev.res = evRefund, told[i].Refunded, st.Ref
				each(specAt[st.Ref], tenantOf(r), ev)
			}
		case Reload:
			next := st.Policy
			for _, h := range out {
				was, now := figures(cur, h.key.Counter), figures(next, h.key.Counter)
				at := slices.IndexFunc(cur.Limits, func(l Limit) bool { return l.Counter() == h.key.Counter })
				to := slices.IndexFunc(next.Limits, func(l Limit) bool { return l.Counter() == h.key.Counter })
				moved := was.Name != now.Name || at != to || cur.Mode != next.Mode || cur.Batch != next.Batch
				h.events = append(h.events, event{kind: evReload, step: i, at: ev.at, limit: now, spec: next, moved: moved})
			}
			cur = next
		case Kill, Stop, Restart:
			ev.kind = evKill
			if st.Kind == Restart {
				ev.kind = evRestart
			}
			for _, h := range out {
				ev.limit = figures(cur, h.key.Counter)
				h.events = append(h.events, ev)
			}
		}
	}
	return out
}
