package policy

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// CostLimit is one entry of a file's costs section: a request (through
// Envoy's ext_proc filter) that matches it reserves units of its domain's
// limits when its headers arrive, and settles at the cost its response
// reports. Names are unique across a policy set.
type CostLimit struct {
	Name string
	// Domain is the file's domain: the limits the units are taken from.
	Domain string
	Match  GateMatch
	// Descriptor is the entries the request is limited on, in order (as
	// one descriptor of a ShouldRateLimit call). Never empty.
	Descriptor []CostEntry
	Reserve    CostReserve
	Source     CostSource
	Pos        Pos // where the cost limit's name is
	// Field is the cost limit's YAML path, e.g. costs[1].
	Field string
}

// CostEntry is one entry of a cost limit's descriptor: a key and either a
// fixed Value or the value of the request header Header (lower case).
// Exactly one of Value and Header is set.
type CostEntry struct {
	Key, Value, Header string
}

// CostReserve is what a request reserves when its headers arrive: Units
// (a fixed figure, reserve: 4000), or the value of the request header
// Header clamped to 1..Max (reserve: {header: x-max-tokens, max: 4000});
// a header that is absent or not a whole number reserves Max.
type CostReserve struct {
	Units  uint32
	Header string
	Max    uint32
}

// Cap is the most one request reserves: Units, or Max.
func (r CostReserve) Cap() uint32 { return max(r.Units, r.Max) }

// CostSourceKind says where a request's real cost comes from.
type CostSourceKind string

// The sources.
const (
	CostResponseHeader  CostSourceKind = "response_header"
	CostResponseTrailer CostSourceKind = "response_trailer"
	CostMetadata        CostSourceKind = "metadata"
)

// CostSource is where the real cost is read at the end of the response:
// a response header or trailer named Name (lower case), or the number at
// Key in the Envoy dynamic metadata namespace Namespace forwarded to
// ext_proc (as Envoy AI Gateway sets its token counts).
type CostSource struct {
	Kind           CostSourceKind
	Name           string
	Namespace, Key string
}

var (
	costKeys        = []string{"name", "match", "descriptor", "reserve", "cost"}
	costEntryKeys   = []string{"key", "value", "header"}
	costReserveKeys = []string{"units", "header", "max"}
	costSourceKeys  = []string{string(CostResponseHeader), string(CostResponseTrailer), string(CostMetadata)}
	costLevel       = &level{what: "a cost limit", keys: costKeys, elsewhere: noElse}
	costEntryLevel  = &level{what: "a cost limit's descriptor entry", keys: costEntryKeys, elsewhere: noElse}
	costReserveLvl  = &level{what: "a cost limit's reserve", keys: costReserveKeys, elsewhere: noElse}
	costSourceLevel = &level{what: "a cost limit's cost", keys: costSourceKeys, elsewhere: noElse}
	costMetaLevel   = &level{what: "a cost's metadata", keys: []string{"namespace", "key"}, elsewhere: noElse}
)

// maxCostEntries bounds a cost limit's descriptor, as the engine bounds a
// request descriptor's entries.
const maxCostEntries = 16

// costs reads the costs section: a list of cost limits.
func (r *reader) costs(n *yaml.Node, field string) []*CostLimit {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "costs must be a list of cost limits (- name: ..., match: {...}, descriptor: [...], reserve: ..., cost: {...}), not %s", describe(n))
		return nil
	}
	var out []*CostLimit
	for i, item := range n.Content {
		f := index(field, i)
		if item = r.deref(item); item == nil {
			break
		}
		if item.Kind != yaml.MappingNode {
			r.errorf(item, f, "a cost limit must be a mapping (name: ..., match: {...}, ...), not %s", describe(item))
			continue
		}
		out = append(out, r.cost(item, f))
	}
	return out
}

func (r *reader) cost(m *yaml.Node, field string) *CostLimit {
	c := &CostLimit{Pos: r.pos(m), Field: field}
	var matchNode, descNode, reserveNode, sourceNode *yaml.Node
	for _, p := range r.pairs(m, field, 0) {
		f := join(field, p.name)
		if isNull(p.val) {
			continue
		}
		switch p.name {
		case "name":
			c.Name, _ = r.str(p.val, f, p.name)
			c.Pos = r.pos(p.val)
		case "match":
			matchNode = p.val
			c.Match = r.gateMatch(p.val, f, "cost limit")
		case "descriptor":
			descNode = p.val
			c.Descriptor = r.costDescriptor(p.val, f)
		case "reserve":
			reserveNode = p.val
			c.Reserve = r.costReserve(p.val, f)
		case "cost":
			sourceNode = p.val
			c.Source = r.costSource(p.val, f)
		default:
			r.unknownKey(p.key, field, costLevel)
		}
	}
	missing := func(key, what string) {
		r.errorf(m, join(field, key), "cost limit %s has no %s: add %s", quote(c.Name), key, what)
	}
	switch {
	case c.Name == "":
		r.errorf(m, join(field, "name"), "a cost limit needs a name: add name: <name>, e.g. name: chat-tokens")
	case matchNode == nil:
		missing("match", "match: {path_prefix: /...} (or authority, or header)")
	case descNode == nil:
		missing("descriptor", "descriptor: [{key: tenant, header: x-tenant}] (the entries its limits are found by)")
	case reserveNode == nil:
		missing("reserve", "reserve: <units> (a fixed figure) or reserve: {header: x-max-tokens, max: <units>}")
	case sourceNode == nil:
		missing("cost", "cost: {response_header: <name>} (or response_trailer: <name>, or metadata: {namespace: ..., key: ...})")
	}
	return c
}

// costDescriptor reads a cost limit's descriptor: a list of entries.
func (r *reader) costDescriptor(n *yaml.Node, field string) []CostEntry {
	if n.Kind != yaml.SequenceNode {
		r.errorf(n, field, "descriptor must be a list of entries ([{key: tenant, header: x-tenant}, {key: route, value: chat}]), not %s", describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		r.errorf(n, field, "descriptor is empty: give at least one entry, e.g. [{key: tenant, header: x-tenant}]")
		return nil
	}
	if len(n.Content) > maxCostEntries {
		r.errorf(n, field, "descriptor has %d entries, at most %d", len(n.Content), maxCostEntries)
		return nil
	}
	var out []CostEntry
	for i, item := range n.Content {
		f := index(field, i)
		if item = r.deref(item); item == nil {
			break
		}
		if !r.mapping(item, f, "a descriptor entry", "key: tenant, header: x-tenant") {
			continue
		}
		var e CostEntry
		var valueGiven, headerGiven bool
		for _, p := range r.pairs(item, f, 0) {
			pf := join(f, p.name)
			switch p.name {
			case "key":
				e.Key, _ = r.str(p.val, pf, p.name)
			case "value":
				e.Value, _ = r.str(p.val, pf, p.name)
				valueGiven = !isNull(p.val)
			case "header":
				e.Header, _ = r.str(p.val, pf, p.name)
				e.Header = strings.ToLower(e.Header)
				headerGiven = !isNull(p.val)
			default:
				r.unknownKey(p.key, f, costEntryLevel)
			}
		}
		switch {
		case e.Key == "":
			r.errorf(item, join(f, "key"), "a descriptor entry needs a key, e.g. key: tenant")
		case valueGiven == headerGiven:
			r.errorf(item, f, "entry %s needs exactly one of value (a fixed value) and header (the request header whose value it takes)", quote(e.Key))
		case headerGiven && e.Header == "":
			r.errorf(item, join(f, "header"), "header is empty: name the request header, e.g. header: x-tenant")
		case valueGiven && e.Value == "":
			r.errorf(item, join(f, "value"), "value is empty: write the entry's value, or take it from a header")
		}
		out = append(out, e)
	}
	return out
}

// costReserve reads reserve: a whole number, or {header, max}.
func (r *reader) costReserve(n *yaml.Node, field string) CostReserve {
	var rs CostReserve
	if n.Kind == yaml.ScalarNode {
		v, ok := r.uint32Field(n, field, "reserve")
		if ok && v == 0 {
			r.errorf(n, field, "reserve must be at least 1: a reservation of nothing cannot refuse a request")
		}
		rs.Units = v
		return rs
	}
	if !r.mapping(n, field, "reserve", "header: x-max-tokens, max: 4000; or a whole number") {
		return rs
	}
	var maxNode *yaml.Node
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case "units":
			v, ok := r.uint32Field(p.val, f, p.name)
			if ok && v == 0 {
				r.errorf(p.val, f, "units must be at least 1: a reservation of nothing cannot refuse a request")
			}
			rs.Units = v
		case "header":
			rs.Header, _ = r.str(p.val, f, p.name)
			rs.Header = strings.ToLower(rs.Header)
		case "max":
			maxNode = p.val
			v, ok := r.uint32Field(p.val, f, p.name)
			if ok && v == 0 {
				r.errorf(p.val, f, "max must be at least 1")
			}
			rs.Max = v
		default:
			r.unknownKey(p.key, field, costReserveLvl)
		}
	}
	switch {
	case rs.Units > 0 && (rs.Header != "" || maxNode != nil):
		r.errorf(n, field, "reserve takes units (a fixed figure) or header with max, not both")
	case rs.Units > 0:
	case rs.Header == "":
		r.errorf(n, join(field, "header"), "reserve needs units: <n>, or header: <request header> with max: <n>")
	case maxNode == nil:
		r.errorf(n, join(field, "max"), "reserve from header %s needs max: the cap it is clamped to, reserved when the header is absent or not a whole number", quote(rs.Header))
	}
	return rs
}

// costSource reads cost: exactly one of response_header, response_trailer
// and metadata.
func (r *reader) costSource(n *yaml.Node, field string) CostSource {
	var s CostSource
	if !r.mapping(n, field, "cost", "response_header: x-usage-total-tokens") {
		return s
	}
	given := 0
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		switch p.name {
		case string(CostResponseHeader), string(CostResponseTrailer):
			given++
			s.Kind = CostSourceKind(p.name)
			if name, ok := r.str(p.val, f, p.name); ok {
				s.Name = strings.ToLower(name)
				if s.Name == "" {
					r.errorf(p.val, f, "%s is empty: name the %s that carries the cost", p.name, strings.ReplaceAll(p.name, "_", " "))
				}
			}
		case string(CostMetadata):
			given++
			s.Kind = CostMetadata
			if !r.mapping(p.val, f, "metadata", "namespace: io.envoy.ai_gateway, key: llm_total_token") {
				continue
			}
			for _, q := range r.pairs(p.val, f, 0) {
				qf := join(f, q.name)
				switch q.name {
				case "namespace":
					s.Namespace, _ = r.str(q.val, qf, q.name)
				case "key":
					s.Key, _ = r.str(q.val, qf, q.name)
				default:
					r.unknownKey(q.key, f, costMetaLevel)
				}
			}
			if s.Namespace == "" || s.Key == "" {
				r.errorf(p.val, f, "metadata needs a namespace and a key, e.g. {namespace: io.envoy.ai_gateway, key: llm_total_token}")
			}
		default:
			r.unknownKey(p.key, field, costSourceLevel)
		}
	}
	if given != 1 {
		r.errorf(n, field, "cost takes exactly one of %s (got %d)", list(costSourceKeys), given)
	}
	return s
}

// checkCosts runs the checks across a set's cost limits: names are unique.
func checkCosts(domains []*Domain) Errors {
	var errs Errors
	seen := map[string]*CostLimit{}
	for _, d := range domains {
		for _, c := range d.Costs {
			if first, dup := seen[c.Name]; dup {
				errs = append(errs, &Error{Pos: c.Pos, Field: join(c.Field, "name"), Msg: fmt.Sprintf(
					"cost limit %s is already defined at %v; cost limit names are unique across the policy (rename one)", quote(c.Name), first.Pos)})
				continue
			}
			seen[c.Name] = c
		}
	}
	return errs
}

// costNode writes c back in the schema's keys (Format).
func costNode(c *CostLimit) mapNode {
	m := newMap(false)
	m.add("name", strNode(c.Name))
	m.add("match", matchNode(c.Match).Node)
	desc := &yaml.Node{Kind: yaml.SequenceNode}
	for _, e := range c.Descriptor {
		em := newMap(true)
		em.add("key", strNode(e.Key))
		if e.Header != "" {
			em.add("header", strNode(e.Header))
		} else {
			em.add("value", strNode(e.Value))
		}
		desc.Content = append(desc.Content, em.Node)
	}
	m.add("descriptor", desc)
	if c.Reserve.Header != "" {
		rm := newMap(true)
		rm.add("header", strNode(c.Reserve.Header))
		rm.add("max", intNode(c.Reserve.Max))
		m.add("reserve", rm.Node)
	} else {
		m.add("reserve", intNode(c.Reserve.Units))
	}
	sm := newMap(true)
	switch c.Source.Kind {
	case CostMetadata:
		mm := newMap(true)
		mm.add("namespace", strNode(c.Source.Namespace))
		mm.add("key", strNode(c.Source.Key))
		sm.add(string(CostMetadata), mm.Node)
	default:
		sm.add(string(c.Source.Kind), strNode(c.Source.Name))
	}
	m.add("cost", sm.Node)
	return m
}
