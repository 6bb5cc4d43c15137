package policy

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Federation tunes a federated descriptor (mode: federated): its limits are
// one global budget per window shared by every region, leased from the
// cross-region coordinator.
type Federation struct {
	// Batch is the units a region leases from the coordinator at a time; 0
	// means the engine's default (a tenth of the limit). A utilization knob,
	// not a safety one: unused units die at the window's end.
	Batch uint32
	// Outage is what the region does while the coordinator is unreachable.
	Outage Outage
	// RegionalLimit is the units per window a region admits on its own
	// during an outage (regional_only only; required there).
	RegionalLimit uint32
}

// Outage is a federated descriptor's answer to a coordinator outage.
type Outage string

// The outage modes.
const (
	// FailClosed serves the escrow the region holds, then denies.
	FailClosed Outage = "fail_closed"
	// RegionalOnly serves the escrow, then a regional budget of
	// regional_limit per window, counted on the region's own Redis and
	// paced (one unit every period/regional_limit).
	RegionalOnly Outage = "regional_only"
)

var federationKeys = []string{"batch", "outage", "regional_limit"}

var federationLevel = &level{
	what:      "a descriptor's federation",
	keys:      federationKeys,
	elsewhere: func(string) string { return "" },
}

// federation reads a descriptor's federation block.
func (r *reader) federation(n *yaml.Node, field string) *Federation {
	fed := &Federation{Outage: FailClosed}
	if n.Kind != yaml.MappingNode {
		r.errorf(n, field, "federation must be a mapping (batch: ..., outage: fail_closed|regional_only, regional_limit: ...), not %s", describe(n))
		return fed
	}
	var regionalNode *yaml.Node
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		if isNull(p.val) {
			if !slices.Contains(federationKeys, p.name) {
				r.unknownKey(p.key, field, federationLevel)
			}
			continue
		}
		switch p.name {
		case "batch":
			b, ok := r.uint32Field(p.val, f, p.name)
			if ok && b == 0 {
				r.errorf(p.val, f, "batch must be at least 1 (leave it out for the engine's default)")
			}
			fed.Batch = b
		case "outage":
			s, ok := r.str(p.val, f, p.name)
			if !ok {
				break
			}
			switch o := Outage(strings.ToLower(s)); o {
			case FailClosed, RegionalOnly:
				fed.Outage = o
			default:
				r.errorf(p.val, f, "%s", enumErr("outage", s, []string{string(FailClosed), string(RegionalOnly)}))
			}
		case "regional_limit":
			v, ok := r.uint32Field(p.val, f, p.name)
			if ok && v == 0 {
				r.errorf(p.val, f, "regional_limit must be at least 1: the units per window this region admits on its own during an outage")
			}
			fed.RegionalLimit, regionalNode = v, p.val
		default:
			r.unknownKey(p.key, field, federationLevel)
		}
	}
	switch {
	case fed.Outage == RegionalOnly && fed.RegionalLimit == 0 && regionalNode == nil:
		r.errorf(n, field, "outage: regional_only needs regional_limit: the units per window this region admits on its own while the coordinator is unreachable, one every period/regional_limit (its static slice, limit/regions, keeps a window the outage covers whole within the limit)")
	case fed.Outage != RegionalOnly && regionalNode != nil:
		r.errorf(regionalNode, join(field, "regional_limit"), "regional_limit applies only with outage: regional_only (fail_closed admits nothing beyond the escrow it holds)")
	}
	return fed
}

// checkFederated reports what a federated descriptor cannot have: limits
// without windows, a lease block, fairness, an on_store_error policy.
func (r *reader) checkFederated(d *Descriptor, field string, modeKey, leaseKey, storeKey, fairKey *yaml.Node) {
	for _, l := range d.Limits {
		if l.Algorithm == GCRA || l.Algorithm == TokenBucket {
			r.errorAt(l.Pos, cmpOr(l.Field, join(field, "rate_limit")), "mode: federated needs a windowed algorithm (fixed_window, sliding_window or quota): "+string(l.Algorithm)+" has no window boundary for the coordinator's grants to die at, which is what keeps every region together within the limit")
		}
	}
	if leaseKey != nil {
		r.errorf(leaseKey, join(field, "lease"), "a federated descriptor leases through its region: tune it with federation: {batch: ...}, not lease")
	}
	if fairKey != nil {
		r.errorf(modeKey, join(field, "mode"), "fairness is not federated yet: a fair limit leases its budget itself, and the federated weighted-fair escrow (pkg/gale/fair.Federated) decides in one process with no store between regions yet; remove mode: federated or fairness")
	}
	if storeKey != nil {
		r.errorf(storeKey, join(field, "on_store_error"), "a federated descriptor answers outages with federation: {outage: fail_closed|regional_only}, not on_store_error")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// federationNode formats a federation block; empty when all defaults.
func federationNode(fed *Federation) mapNode {
	m := newMap(true)
	if fed.Batch > 0 {
		m.add("batch", intNode(fed.Batch))
	}
	if fed.Outage != "" && fed.Outage != FailClosed {
		m.add("outage", strNode(string(fed.Outage)))
	}
	if fed.RegionalLimit > 0 {
		m.add("regional_limit", intNode(fed.RegionalLimit))
	}
	return m
}
