package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Controllers a gate may use.
var gateControllers = []string{"gradient2", "aimd", "p95", "vegas"}

var (
	gateKeys   = []string{"name", "match", "controller", "min_limit", "max_limit", "initial_limit", "params", "queue", "reject", "distributed"}
	matchKeys  = []string{"authority", "path_prefix", "header"}
	queueKeys  = []string{"max", "timeout", "order"}
	rejectKeys = []string{"status", "retry_after"}
	noElse     = func(string) string { return "" }
	gateLevel  = &level{what: "a concurrency gate", keys: gateKeys, elsewhere: noElse}
	matchLevel = &level{what: "a gate's match", keys: matchKeys, elsewhere: noElse}
	queueLevel = &level{what: "a gate's queue", keys: queueKeys, elsewhere: noElse}
	rejLevel   = &level{what: "a gate's reject", keys: rejectKeys, elsewhere: noElse}
	headerLvl  = &level{what: "a gate's header match", keys: []string{"name", "value"}, elsewhere: noElse}
)

// gates reads the concurrency section: a list of gates.
func (r *reader) gates(n *yaml.Node, field string) []*Gate {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "concurrency must be a list of gates (- name: ..., match: {...}), not %s", describe(n))
		return nil
	}
	var out []*Gate
	for i, item := range n.Content {
		f := index(field, i)
		item = r.deref(item)
		if item == nil {
			break
		}
		if item.Kind != yaml.MappingNode {
			r.errorf(item, f, "a gate must be a mapping (name: ..., match: {...}), not %s", describe(item))
			continue
		}
		if g := r.gate(item, f); g != nil {
			out = append(out, g)
		}
	}
	return out
}

func (r *reader) gate(m *yaml.Node, field string) *Gate {
	g := &Gate{Controller: "gradient2", Reject: GateReject{Status: 503, RetryAfter: time.Second}, Pos: r.pos(m), Field: field}
	var matchNode *yaml.Node
	for _, p := range r.pairs(m, field, 0) {
		f := join(field, p.name)
		if isNull(p.val) {
			continue
		}
		switch p.name {
		case "name":
			g.Name, _ = r.str(p.val, f, p.name)
			g.Pos = r.pos(p.val)
		case "match":
			matchNode = p.val
			g.Match = r.gateMatch(p.val, f, "gate")
		case "controller":
			if s, ok := r.str(p.val, f, p.name); ok {
				if !slices.Contains(gateControllers, s) {
					r.errorf(p.val, f, "%s", enumErr("controller", s, gateControllers))
				}
				g.Controller = s
			}
		case "min_limit", "max_limit", "initial_limit":
			v, ok := r.uint32Field(p.val, f, p.name)
			if ok && v == 0 {
				r.errorf(p.val, f, "%s must be at least 1 (leave it out for the default)", p.name)
			}
			switch p.name {
			case "min_limit":
				g.MinLimit = int(v)
			case "max_limit":
				g.MaxLimit = int(v)
			default:
				g.InitialLimit = int(v)
			}
		case "params":
			g.Params = r.params(p.val, f)
		case "queue":
			g.Queue = r.gateQueue(p.val, f)
		case "reject":
			g.Reject = r.gateReject(p.val, f)
		case "distributed":
			g.Distributed = r.distributed(p.val, f)
		default:
			r.unknownKey(p.key, field, gateLevel)
		}
	}
	switch {
	case g.Name == "":
		r.errorf(m, join(field, "name"), "a gate needs a name: add name: <gate name>, e.g. name: checkout")
	case matchNode == nil:
		r.errorf(m, join(field, "match"), "gate %s has no match: add match: {path_prefix: /...} (or authority, or header)", quote(g.Name))
	}
	if g.Distributed != nil && g.Queue.Max > 0 {
		r.errorf(m, join(field, "queue"), "gate %s is distributed and cannot queue: its sidecars admit below their share of the fleet's ceiling or turn the request away (remove queue, or distributed)", quote(g.Name))
	}
	if g.MinLimit > 0 && g.MaxLimit > 0 && g.MinLimit > g.MaxLimit {
		r.errorf(m, field, "min_limit (%d) is above max_limit (%d)", g.MinLimit, g.MaxLimit)
	}
	if g.InitialLimit > 0 && ((g.MinLimit > 0 && g.InitialLimit < g.MinLimit) || (g.MaxLimit > 0 && g.InitialLimit > g.MaxLimit)) {
		r.errorf(m, join(field, "initial_limit"), "initial_limit (%d) must lie between min_limit and max_limit", g.InitialLimit)
	}
	return g
}

func (r *reader) mapping(n *yaml.Node, field, what, example string) bool {
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "%s must be a mapping (%s), not %s", what, example, describe(n))
		return false
	}
	return true
}

// gateMatch reads the match of a gate or of a cost limit (what names it).
func (r *reader) gateMatch(n *yaml.Node, field, what string) GateMatch {
	var gm GateMatch
	if !r.mapping(n, field, "match", "path_prefix: /api, authority: ..., header: {name: ..., value: ...}") {
		return gm
	}
	given := 0
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "authority":
			gm.Authority, _ = r.str(p.val, f, p.name)
			given++
		case "path_prefix":
			if s, ok := r.str(p.val, f, p.name); ok {
				if !strings.HasPrefix(s, "/") {
					r.errorf(p.val, f, "path_prefix must start with /, got %s", quote(s))
				}
				gm.PathPrefix = s
			}
			given++
		case "header":
			if !r.mapping(p.val, f, "header", "name: x-tier, value: gold") {
				continue
			}
			h := &HeaderMatch{}
			for _, q := range r.pairs(p.val, f, 0) {
				switch q.name {
				case "name":
					h.Name, _ = r.str(q.val, join(f, "name"), "name")
					h.Name = strings.ToLower(h.Name)
				case "value":
					h.Value, _ = r.str(q.val, join(f, "value"), "value")
				default:
					r.unknownKey(q.key, f, headerLvl)
				}
			}
			if h.Name == "" {
				r.errorf(p.val, join(f, "name"), "header match needs the header's name")
			}
			gm.Header = h
			given++
		default:
			r.unknownKey(p.key, field, matchLevel)
		}
	}
	if given == 0 {
		r.errorf(n, field, "match is empty: give path_prefix, authority or header (a %s for every request would be path_prefix: /)", what)
	}
	return gm
}

func (r *reader) params(n *yaml.Node, field string) map[string]Param {
	if !r.mapping(n, field, "params", "tolerance: 1.5, rtt_window: 100") {
		return nil
	}
	out := map[string]Param{}
	for _, p := range r.pairs(n, field, 0) {
		if p.val.Kind != yaml.ScalarNode || isNull(p.val) {
			r.errorf(p.val, join(field, p.name), "a controller parameter is a number or a duration, not %s", describe(p.val))
			continue
		}
		out[p.name] = Param{Value: p.val.Value, Pos: r.pos(p.val)}
	}
	return out
}

func (r *reader) duration(n *yaml.Node, field, name string) (time.Duration, bool) {
	s, ok := r.str(n, field, name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if _, nerr := strconv.ParseFloat(s, 64); err != nil && nerr == nil {
		r.errorf(n, field, "%s %s has no unit: write a duration such as %sms or %ss", name, s, s, s)
		return 0, false
	}
	if err != nil || d <= 0 {
		r.errorf(n, field, "%s must be a positive Go duration such as 100ms or 2s, not %s", name, quote(s))
		return 0, false
	}
	return d, true
}

func (r *reader) gateQueue(n *yaml.Node, field string) GateQueue {
	var q GateQueue
	if !r.mapping(n, field, "queue", "max: 50, timeout: 100ms, order: fifo") {
		return q
	}
	timeoutGiven := false
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "max":
			v, _ := r.uint32Field(p.val, f, p.name)
			q.Max = int(v)
		case "timeout":
			timeoutGiven = !isNull(p.val)
			q.Timeout, _ = r.duration(p.val, f, p.name)
		case "order":
			if s, ok := r.str(p.val, f, p.name); ok {
				switch s {
				case "fifo":
				case "lifo":
					q.LIFO = true
				default:
					r.errorf(p.val, f, "%s", enumErr("order", s, []string{"fifo", "lifo"}))
				}
			}
		default:
			r.unknownKey(p.key, field, queueLevel)
		}
	}
	if q.Max > 0 && !timeoutGiven { // a timeout given but bad is reported where it is read
		r.errorf(n, join(field, "timeout"), "a queue needs a timeout (e.g. timeout: 50ms) below Envoy's ext_proc message_timeout")
	}
	return q
}

func (r *reader) gateReject(n *yaml.Node, field string) GateReject {
	rj := GateReject{Status: 503, RetryAfter: time.Second}
	if !r.mapping(n, field, "reject", "status: 503, retry_after: 1s") {
		return rj
	}
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "status":
			if v, ok := r.uint32Field(p.val, f, p.name); ok {
				if v < 400 || v > 599 {
					r.errorf(p.val, f, "status %d is not an error status: use 4xx or 5xx (e.g. 503 or 429)", v)
				}
				rj.Status = int(v)
			}
		case "retry_after":
			rj.RetryAfter, _ = r.duration(p.val, f, p.name)
		default:
			r.unknownKey(p.key, field, rejLevel)
		}
	}
	return rj
}

// checkGates runs the checks across a set's gates: names are unique.
func checkGates(gates []*Gate) Errors {
	var errs Errors
	seen := map[string]*Gate{}
	for _, g := range gates {
		if first, dup := seen[g.Name]; dup {
			errs = append(errs, &Error{Pos: g.Pos, Field: join(g.Field, "name"), Msg: fmt.Sprintf(
				"gate %s is already defined at %v; gate names are unique across the policy (rename one)", quote(g.Name), first.Pos)})
			continue
		}
		seen[g.Name] = g
	}
	return errs
}
