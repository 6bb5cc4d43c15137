package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// limitSource is where a parsed limit came from, for the checks that span
// the whole domain (unique names, replaces naming a limit).
type limitSource struct {
	limit         *Limit
	field         string       // e.g. descriptors[0].rate_limits[1]
	nameNode      *yaml.Node   // the name's value; nil when unnamed
	replaceNodes  []*yaml.Node // the value of each Replaces[i]
	replaceFields []string     // the field of each Replaces[i]
}

var unitNames = []string{"second", "minute", "hour", "day", "week", "month", "year"}

// limitList reads the rate_limits extension: a list of rate_limit blocks.
func (r *reader) limitList(n *yaml.Node, field string) []*Limit {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "rate_limits must be a list of rate limits (each item like a rate_limit block), not %s", describe(n))
		return nil
	}
	var out []*Limit
	for i, e := range n.Content {
		f := index(field, i)
		if e = r.deref(e); e == nil {
			break
		}
		if e.Kind != yaml.MappingNode {
			r.errorf(e, f, "a rate_limits item must be a mapping like a rate_limit block (unit: ..., requests_per_unit: ...), not %s", describe(e))
			continue
		}
		if l := r.limit(e, f); l != nil {
			out = append(out, l)
		}
	}
	return out
}

// limit reads one rate_limit block. A null block is no limit, as upstream.
func (r *reader) limit(n *yaml.Node, field string) *Limit {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "rate_limit must be a mapping (unit: ..., requests_per_unit: ...), not %s", describe(n))
		return nil
	}
	l := &Limit{Algorithm: FixedWindow, UnitMultiplier: 1, Pos: r.pos(n), Field: shorten(field)}
	src := limitSource{limit: l, field: field}
	var (
		unitNode                   *yaml.Node
		unit                       string
		unitOK, algoOK, unlimOK    = true, true, true
		algoKey, burstKey, multKey *yaml.Node
	)
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "unit":
			if !isNull(p.val) {
				unitNode = p.val
				unit, unitOK = r.str(p.val, f, "unit")
			}
		case "requests_per_unit":
			// Absent or null is 0, which denies everything: upstream reads it so.
			l.RequestsPerUnit, _ = r.uint32Field(p.val, f, p.name)
		case "unlimited":
			l.Unlimited, unlimOK = r.boolean(p.val, f, p.name)
		case "name":
			l.Name, _ = r.str(p.val, f, "name")
			if l.Name != "" {
				src.nameNode = p.val
			}
		case "replaces":
			r.replaces(p.val, f, &src)
		case "algorithm":
			if !isNull(p.val) {
				algoKey = p.key
				l.Algorithm, algoOK = r.algorithm(p.val, f)
			}
		case "burst":
			if !isNull(p.val) {
				burstKey = p.key
				l.Burst, _ = r.uint32Field(p.val, f, p.name)
			}
		case "unit_multiplier":
			if !isNull(p.val) {
				multKey = p.key
				m, ok := r.uint32Field(p.val, f, p.name)
				switch {
				case ok && m == 0:
					r.errorf(p.val, f, "unit_multiplier must be at least 1 (leave it out for 1; unit: second with unit_multiplier: 30 is a 30-second window)")
				case ok:
					l.UnitMultiplier = m
				}
			}
		default:
			r.unknownKey(p.key, field, limitLevel)
		}
	}
	switch {
	case r.halted:
		return l
	case !unlimOK:
		// Whether it is unlimited is unknown: checking the unit either way
		// would only add a second, misleading error.
	case l.Unlimited:
		if unitNode != nil && unitOK && unit != "" {
			r.errorf(unitNode, join(field, "unit"), "an unlimited limit takes no unit (remove unit, or remove unlimited: true to enforce requests_per_unit per unit)")
		}
		for _, k := range []*yaml.Node{algoKey, burstKey, multKey} {
			if k != nil {
				r.errorf(k, join(field, k.Value), "an unlimited limit takes no %s (remove %s, or remove unlimited: true)", k.Value, k.Value)
			}
		}
	default:
		switch {
		case unitNode == nil:
			r.errorf(n, field, "no unit: add unit: %s (or unlimited: true for a limit that never denies)", list(unitNames))
		case !unitOK:
		case unit == "":
			r.errorf(unitNode, join(field, "unit"), "unit is empty (want %s)", list(unitNames))
		default:
			if u, ok := parseUnit(unit); ok {
				l.Unit = u
			} else {
				r.errorf(unitNode, join(field, "unit"), "%s", enumErr("unit", unit, unitNames))
			}
		}
		if burstKey != nil && algoOK && l.Algorithm != GCRA && l.Algorithm != TokenBucket {
			r.errorf(burstKey, join(field, "burst"), "burst applies only to algorithm gcra or token_bucket, not %s (set algorithm: gcra or token_bucket, or remove burst)", l.Algorithm)
		}
		if algoOK && l.Algorithm == Quota {
			switch {
			case l.Unit != "" && l.Unit != Day && l.Unit != Week && l.Unit != Month && l.Unit != Year:
				r.errorf(unitNode, join(field, "unit"), "algorithm: quota counts per UTC calendar day, week (from Monday), month or year: set unit to day, week, month or year, not %s (or use fixed_window for a %s window)", l.Unit, l.Unit)
			case multKey != nil && l.UnitMultiplier > 1:
				r.errorf(multKey, join(field, "unit_multiplier"), "algorithm: quota takes no unit_multiplier: its window is one calendar %s (remove unit_multiplier, or use fixed_window for %d × %s)", l.Unit, l.UnitMultiplier, cmpOr(string(l.Unit), "unit"))
			}
		}
	}
	for i, name := range l.Replaces {
		if l.Name != "" && name == l.Name {
			r.errorf(src.replaceNodes[i], src.replaceFields[i], "a limit cannot replace itself: %s is this limit's own name (name another limit of this domain, or remove the entry)", quote(name))
		}
	}
	r.limits = append(r.limits, src)
	return l
}

// checkCounters refuses two limits of one descriptor that would count in
// one counter. A counter is what it counts: the domain, the descriptor
// path, the period (unit × unit_multiplier) and the algorithm — not the
// limit's name, which is a label, nor its place in rate_limits, nor its
// figures, so that a reload renaming, reordering or re-figuring a limit
// keeps its count (pkg/engine, key.go). Two limits alike in period and
// algorithm would share that counter and each count every request, so
// neither would mean what it says. They are refused rather than told apart
// by something else, since nothing else is left that is not a label, a
// place or a figure; and they are never needed: of two windows of one
// period the smaller limit always binds first, and a second rate of a
// bucket can be written per another unit (600 per minute beside 100 per
// second).
func (r *reader) checkCounters(d *Descriptor) {
	type counter struct {
		period    time.Duration
		algorithm Algorithm
	}
	seen := map[counter]*Limit{}
	for _, l := range d.Limits {
		if l.Unlimited || l.RequestsPerUnit == 0 || l.Unit == "" {
			continue // nothing counted
		}
		c := counter{l.Period(), l.Algorithm}
		first, dup := seen[c]
		if !dup {
			seen[c] = l
			continue
		}
		hint := ""
		if l.Algorithm == GCRA || l.Algorithm == TokenBucket {
			hint = fmt.Sprintf("; a second %s rate can be written per another unit, e.g. unit: minute with 60 × requests_per_unit", l.Algorithm)
		}
		r.errorAt(l.Pos, l.Field, fmt.Sprintf("counts the same requests as the limit at line %d: both count per %s with %s, and a counter is the descriptor, the period and the algorithm (a name does not tell limits apart), so the two would share one counter and count every request twice; remove the one that never binds, or give one another period (unit or unit_multiplier)%s",
			first.Pos.Line, periodText(first), l.Algorithm, hint))
	}
}

// periodText is a limit's period as written: "second", "30 × second".
func periodText(l *Limit) string {
	if l.UnitMultiplier > 1 {
		return fmt.Sprintf("%d × %s", l.UnitMultiplier, l.Unit)
	}
	return string(l.Unit)
}

// parseUnit maps a unit name to its Unit the way upstream does: upper-case
// it (strings.ToUpper, so "Second" and "SECOND" are fine) and look it up.
func parseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for _, u := range Units {
		if up == strings.ToUpper(string(u)) {
			return u, true
		}
	}
	return "", false
}

// algorithm reads the algorithm extension.
func (r *reader) algorithm(n *yaml.Node, field string) (Algorithm, bool) {
	s, ok := r.str(n, field, "algorithm")
	if !ok {
		return FixedWindow, false
	}
	for _, a := range []Algorithm{FixedWindow, SlidingWindow, GCRA, TokenBucket, Quota} {
		if strings.EqualFold(s, string(a)) {
			return a, true
		}
	}
	r.errorf(n, field, "%s", enumErr("algorithm", s, []string{"fixed_window", "sliding_window", "gcra", "token_bucket", "quota"}))
	return FixedWindow, false
}

// replaces reads a limit's replaces list into src.limit.Replaces.
func (r *reader) replaces(n *yaml.Node, field string, src *limitSource) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "replaces must be a list of entries like - name: <limit name>, not %s", describe(n))
		return
	}
	for i, e := range n.Content {
		f := index(field, i)
		if e = r.deref(e); e == nil {
			return
		}
		if e.Kind != yaml.MappingNode {
			r.errorf(e, f, "a replaces entry must be a mapping - name: <limit name>, not %s", describe(e))
			continue
		}
		var nameNode *yaml.Node
		var name string
		nameOK := true
		for _, p := range r.pairs(e, f, 0) {
			if p.name == "name" {
				nameNode = p.val
				name, nameOK = r.str(p.val, join(f, "name"), "name")
			} else {
				r.unknownKey(p.key, f, replacesLevel)
			}
		}
		switch {
		case !nameOK:
		case nameNode == nil:
			r.errorf(e, f, "replaces entry has no name: write name: <the name of the limit this one replaces>")
		case name == "":
			r.errorf(nameNode, join(f, "name"), "replaces entry has an empty name: write the name of the limit this one replaces")
		default:
			src.limit.Replaces = append(src.limit.Replaces, name)
			src.replaceNodes = append(src.replaceNodes, nameNode)
			src.replaceFields = append(src.replaceFields, join(f, "name"))
		}
	}
}

// lease reads the lease block of a leased descriptor.
func (r *reader) lease(n *yaml.Node, field string) Lease {
	ls := Lease{WindowCoupled: true}
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "lease must be a mapping (batch: ..., low_water: ..., return_idle_after: ...), not %s", describe(n))
		return ls
	}
	var lowNode, sizingNode *yaml.Node
	batchSet := false
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		if isNull(p.val) {
			if !slices.Contains(leaseKeys, p.name) {
				r.unknownKey(p.key, field, leaseLevel)
			}
			continue // null leaves the default
		}
		switch p.name {
		case "batch":
			if p.val.Kind == yaml.ScalarNode && p.val.Value == "auto" {
				ls.Auto = true
				continue
			}
			b, ok := r.uint32Field(p.val, f, p.name)
			switch {
			case ok && b == 0:
				r.errorf(p.val, f, "batch must be at least 1 (leave it out for the engine's default)")
			case ok:
				ls.Batch, batchSet = b, true
			}
		case "sizing":
			sizingNode = p.val
			ls.OrderCost, ls.StrandPenalty = r.sizing(p.val, f)
		case "window_coupled":
			ls.WindowCoupled, _ = r.boolean(p.val, f, p.name)
		case "low_water":
			var ok bool
			if ls.LowWater, ok = r.uint32Field(p.val, f, p.name); ok {
				lowNode = p.val
			}
		case "return_idle_after":
			s, ok := r.str(p.val, f, p.name)
			if !ok {
				break
			}
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				r.errorf(p.val, f, "return_idle_after must be a Go duration such as 30s or 5m, not %s", quote(s))
			case d <= 0:
				r.errorf(p.val, f, "return_idle_after must be above zero, e.g. 30s (leave it out to keep idle credits)")
			default:
				ls.ReturnIdleAfter = d
			}
		default:
			r.unknownKey(p.key, field, leaseLevel)
		}
	}
	if sizingNode != nil && !ls.Auto {
		r.errorf(sizingNode, join(field, "sizing"), "sizing tunes the learned batch: it goes with batch: auto (or remove sizing)")
	}
	if batchSet && lowNode != nil && ls.LowWater >= ls.Batch {
		r.errorf(lowNode, join(field, "low_water"), "low_water (%d) must be below batch (%d): it is the credit count at which a background refill starts", ls.LowWater, ls.Batch)
	}
	return ls
}

// sizing reads lease.sizing: the EOQ costs the learned batch trades off.
func (r *reader) sizing(n *yaml.Node, field string) (orderCost, strandPenalty float64) {
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "sizing must be a mapping (order_cost: 1, strand_penalty: 1), not %s", describe(n))
		return 0, 0
	}
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		v, err := strconv.ParseFloat(p.val.Value, 64)
		if p.val.Kind != yaml.ScalarNode || err != nil || v <= 0 {
			r.errorf(p.val, f, "%s must be a positive number, not %s", p.name, describe(p.val))
			continue
		}
		switch p.name {
		case "order_cost":
			orderCost = v
		case "strand_penalty":
			strandPenalty = v
		default:
			r.unknownKey(p.key, field, sizingLevel)
		}
	}
	return orderCost, strandPenalty
}
