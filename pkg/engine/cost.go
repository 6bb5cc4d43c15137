package engine

import (
	"strings"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// costRule is one compiled cost limit (the costs section of a policy file).
type costRule struct {
	spec *policy.CostLimit
	auth []string // Authority split on '*', nil when it matches any authority
}

// ChooseCost returns the first cost limit (in policy order) whose match
// the request's authority, path and headers satisfy, with its reservation
// built from the request's headers. header returns a request header's
// value by lower-case name, and whether it is present. A request missing a
// header its cost limit's descriptor reads is not budgeted (false), as
// Envoy sends no descriptor for a request_headers action whose header is
// absent.
func (e *Engine) ChooseCost(authority, path string, header func(name string) (string, bool)) (CostChoice, bool) {
	for _, cr := range e.cur.Load().costs {
		spec := cr.spec
		if !matches(&spec.Match, cr.auth, authority, path, header) {
			continue
		}
		d := Descriptor{Entries: make([]Entry, 0, len(spec.Descriptor))}
		for _, en := range spec.Descriptor {
			v := en.Value
			if en.Header != "" {
				hv, ok := header(en.Header)
				if !ok {
					return CostChoice{}, false
				}
				v = hv
			}
			d.Entries = append(d.Entries, Entry{Key: en.Key, Value: v})
		}
		units := int64(spec.Reserve.Units)
		if spec.Reserve.Header != "" {
			units = reservation(header, spec.Reserve.Header, int64(spec.Reserve.Max))
		}
		c := CostChoice{
			Name:    spec.Name,
			Request: Request{Domain: spec.Domain, Descriptors: []Descriptor{d}, HitsAddend: uint32(units)},
			Cap:     int64(spec.Reserve.Cap()),
			Source:  costSource(spec.Source),
		}
		return c, true
	}
	return CostChoice{}, false
}

// reservation is what a request reserves from header name: its value
// clamped to 1..cap, or cap when it is absent or not a whole number.
func reservation(header func(string) (string, bool), name string, cap int64) int64 {
	v, ok := header(name)
	if !ok {
		return cap
	}
	n, err := ParseCost(v)
	if err != nil {
		return cap
	}
	return min(max(n, 1), cap)
}

func costSource(s policy.CostSource) CostSource {
	out := CostSource{Name: s.Name, Namespace: s.Namespace, Key: s.Key}
	switch s.Kind {
	case policy.CostResponseHeader:
		out.Kind = CostFromResponseHeader
	case policy.CostResponseTrailer:
		out.Kind = CostFromResponseTrailer
	case policy.CostMetadata:
		out.Kind = CostFromMetadata
	}
	return out
}

// matches reports whether a request's authority, path and headers satisfy
// m (auth is m.Authority split on '*', nil for any authority).
func matches(m *policy.GateMatch, auth []string, authority, path string, header func(string) (string, bool)) bool {
	if m.PathPrefix != "" && !strings.HasPrefix(path, m.PathPrefix) {
		return false
	}
	if auth != nil && !globParts(auth, authority) {
		return false
	}
	if h := m.Header; h != nil {
		v, ok := header(h.Name)
		if !ok || (h.Value != "" && v != h.Value) {
			return false
		}
	}
	return true
}

// compileCosts builds the cost limits of set's domains, in domain then
// file order.
func compileCosts(set *policy.Set) []*costRule {
	var out []*costRule
	for _, d := range set.Domains {
		for _, spec := range d.Costs {
			cr := &costRule{spec: spec}
			if spec.Match.Authority != "" {
				cr.auth = strings.Split(spec.Match.Authority, "*")
			}
			out = append(out, cr)
		}
	}
	return out
}
