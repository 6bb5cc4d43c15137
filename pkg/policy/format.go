package policy

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Notes annotate a formatted policy with comments. Each function, when set,
// returns the comment for one limit or gate ("" for none); a comment is
// written at the end of the limit's or the gate name's line.
type Notes struct {
	Limit func(l *Limit) string
	Gate  func(g *Gate) string
}

// Format writes d back as a policy file in the schema's own keys: YAML
// names (requests_per_unit, return_idle_after), durations as written
// (30s, 1m30s), limits, leases and gate settings in flow style, and only
// what differs from the defaults. Parsing the result gives back the same
// domain (Pos aside). It returns an error only if the YAML encoder fails.
func Format(d *Domain, notes Notes) ([]byte, error) {
	top := newMap(false)
	if d.Name != "" {
		top.add("domain", strNode(d.Name))
	}
	if len(d.Descriptors) > 0 {
		top.add("descriptors", descriptorList(d.Descriptors, notes))
	}
	if len(d.Gates) > 0 {
		gates := &yaml.Node{Kind: yaml.SequenceNode}
		for _, g := range d.Gates {
			gates.Content = append(gates.Content, gateNode(g, notes).Node)
		}
		top.add("concurrency", gates)
	}
	if len(d.Costs) > 0 {
		costs := &yaml.Node{Kind: yaml.SequenceNode}
		for _, c := range d.Costs {
			costs.Content = append(costs.Content, costNode(c).Node)
		}
		top.add("costs", costs)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(top.Node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// mapNode is a mapping being built, key by key.
type mapNode struct{ *yaml.Node }

func newMap(flow bool) mapNode {
	n := &yaml.Node{Kind: yaml.MappingNode}
	if flow {
		n.Style = yaml.FlowStyle
	}
	return mapNode{n}
}

func (m mapNode) add(key string, v *yaml.Node) {
	m.Content = append(m.Content, strNode(key), v)
}

// strNode is a string scalar, quoted by the encoder whenever plain text would
// read as something else (123, true, ~). A string that is not UTF-8 (from a
// !!binary value) is left untagged: the encoder writes it as !!binary.
func strNode(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: s}
	if utf8.ValidString(s) {
		n.Tag = "!!str"
	}
	return n
}

func intNode[T uint32 | int](v T) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(int64(v), 10)}
}

func floatNode(v float64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(v, 'g', -1, 64)}
}

func boolNode(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
}

// durationNode writes d the way people write it: 30s, 1m30s, 1h, 100ms.
func durationNode(d time.Duration) *yaml.Node {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return strNode(s)
}

func descriptorList(ds []*Descriptor, notes Notes) *yaml.Node {
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, d := range ds {
		list.Content = append(list.Content, descriptorNode(d, notes).Node)
	}
	return list
}

func descriptorNode(d *Descriptor, notes Notes) mapNode {
	m := newMap(false)
	m.add("key", strNode(d.Key))
	if d.Value != "" {
		m.add("value", strNode(d.Value))
	}
	for _, f := range []struct {
		name string
		on   bool
	}{
		{"shadow_mode", d.ShadowMode}, {"quota_mode", d.QuotaMode}, {"detailed_metric", d.DetailedMetric},
		{"value_to_metric", d.ValueToMetric}, {"share_threshold", d.ShareThreshold},
	} {
		if f.on {
			m.add(f.name, boolNode(true))
		}
	}
	if d.Mode != "" && d.Mode != Strict {
		m.add("mode", strNode(string(d.Mode)))
	}
	if d.Mode == Leased {
		if ls := leaseNode(d.Lease); len(ls.Content) > 0 {
			m.add("lease", ls.Node)
		}
	}
	if d.Mode == Federated && d.Federation != nil {
		if fs := federationNode(d.Federation); len(fs.Content) > 0 {
			m.add("federation", fs.Node)
		}
	}
	if d.OnStoreError != "" && d.OnStoreError != OnErrorError {
		m.add("on_store_error", strNode(string(d.OnStoreError)))
	}
	if fz := d.Fairness; fz != nil {
		f := newMap(true)
		f.add("tenant_key", strNode(fz.TenantKey))
		if len(fz.Weights) > 0 {
			w := newMap(true)
			for _, t := range slices.Sorted(maps.Keys(fz.Weights)) {
				w.add(t, floatNode(fz.Weights[t]))
			}
			f.add("weights", w.Node)
		}
		if fz.DefaultWeight != 1 {
			f.add("default_weight", floatNode(fz.DefaultWeight))
		}
		if fz.MaxTenants != DefaultFairTenants {
			f.add("max_tenants", intNode(fz.MaxTenants))
		}
		m.add("fairness", f.Node)
	}
	switch len(d.Limits) {
	case 0:
	case 1:
		m.add("rate_limit", limitNode(d.Limits[0], notes))
	default:
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for _, l := range d.Limits {
			list.Content = append(list.Content, limitNode(l, notes))
		}
		m.add("rate_limits", list)
	}
	if len(d.Descriptors) > 0 {
		m.add("descriptors", descriptorList(d.Descriptors, notes))
	}
	return m
}

func limitNode(l *Limit, notes Notes) *yaml.Node {
	m := newMap(true)
	if l.Name != "" {
		m.add("name", strNode(l.Name))
	}
	if l.Unlimited {
		m.add("unlimited", boolNode(true))
	} else {
		m.add("unit", strNode(string(l.Unit)))
		if l.UnitMultiplier > 1 {
			m.add("unit_multiplier", intNode(l.UnitMultiplier))
		}
		m.add("requests_per_unit", intNode(l.RequestsPerUnit))
		if l.Algorithm != "" && l.Algorithm != FixedWindow {
			m.add("algorithm", strNode(string(l.Algorithm)))
		}
		if l.Burst > 0 {
			m.add("burst", intNode(l.Burst))
		}
	}
	if len(l.Replaces) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, name := range l.Replaces {
			r := newMap(true)
			r.add("name", strNode(name))
			list.Content = append(list.Content, r.Node)
		}
		m.add("replaces", list)
	}
	if notes.Limit != nil {
		m.LineComment = comment(notes.Limit(l))
	}
	return m.Node
}

func leaseNode(ls Lease) mapNode {
	m := newMap(true)
	switch {
	case ls.Auto:
		m.add("batch", strNode("auto"))
		if ls.OrderCost > 0 || ls.StrandPenalty > 0 {
			s := newMap(true)
			if ls.OrderCost > 0 {
				s.add("order_cost", floatNode(ls.OrderCost))
			}
			if ls.StrandPenalty > 0 {
				s.add("strand_penalty", floatNode(ls.StrandPenalty))
			}
			m.add("sizing", s.Node)
		}
	case ls.Batch > 0:
		m.add("batch", intNode(ls.Batch))
	}
	if !ls.WindowCoupled {
		m.add("window_coupled", boolNode(false))
	}
	if ls.LowWater > 0 {
		m.add("low_water", intNode(ls.LowWater))
	}
	if ls.ReturnIdleAfter > 0 {
		m.add("return_idle_after", durationNode(ls.ReturnIdleAfter))
	}
	return m
}

func gateNode(g *Gate, notes Notes) mapNode {
	m := newMap(false)
	name := strNode(g.Name)
	if notes.Gate != nil {
		name.LineComment = comment(notes.Gate(g))
	}
	m.Content = append(m.Content, strNode("name"), name)
	m.add("match", matchNode(g.Match).Node)
	if g.Controller != "" && g.Controller != "gradient2" {
		m.add("controller", strNode(g.Controller))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"min_limit", g.MinLimit}, {"max_limit", g.MaxLimit}, {"initial_limit", g.InitialLimit}} {
		if f.v > 0 {
			m.add(f.name, intNode(f.v))
		}
	}
	if len(g.Params) > 0 {
		p := newMap(true)
		for _, k := range slices.Sorted(maps.Keys(g.Params)) {
			// As written: a number stays a plain number, anything else a
			// string (quoted when plain text would read as null or a bool).
			v := g.Params[k].Value
			n := strNode(v)
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				n.Tag = ""
			}
			p.add(k, n)
		}
		m.add("params", p.Node)
	}
	if q := g.Queue; q.Max > 0 || q.Timeout > 0 || q.LIFO {
		qm := newMap(true)
		if q.Max > 0 {
			qm.add("max", intNode(q.Max))
		}
		if q.Timeout > 0 {
			qm.add("timeout", durationNode(q.Timeout))
		}
		if q.LIFO {
			qm.add("order", strNode("lifo"))
		}
		m.add("queue", qm.Node)
	}
	if rj := g.Reject; (rj.Status != 0 && rj.Status != 503) || (rj.RetryAfter != 0 && rj.RetryAfter != time.Second) {
		rm := newMap(true)
		if rj.Status != 0 && rj.Status != 503 {
			rm.add("status", intNode(rj.Status))
		}
		if rj.RetryAfter != 0 && rj.RetryAfter != time.Second {
			rm.add("retry_after", durationNode(rj.RetryAfter))
		}
		m.add("reject", rm.Node)
	}
	if g.Distributed != nil {
		m.add("distributed", distributedNode(g.Distributed).Node)
	}
	return m
}

// matchNode writes the match of a gate or of a cost limit.
func matchNode(gm GateMatch) mapNode {
	match := newMap(true)
	if gm.PathPrefix != "" {
		match.add("path_prefix", strNode(gm.PathPrefix))
	}
	if gm.Authority != "" {
		match.add("authority", strNode(gm.Authority))
	}
	if h := gm.Header; h != nil {
		hm := newMap(true)
		hm.add("name", strNode(h.Name))
		if h.Value != "" {
			hm.add("value", strNode(h.Value))
		}
		match.add("header", hm.Node)
	}
	return match
}

// comment makes text a YAML comment on one line.
func comment(text string) string {
	if text == "" {
		return ""
	}
	return "# " + strings.NewReplacer("\n", " ", "\r", " ").Replace(text)
}
