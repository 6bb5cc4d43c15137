package policy

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Bounds on one file, so that hostile input (an alias "billion laughs", a
// self-referencing alias, a file of a million mistakes) costs bounded time
// and memory and still gets a clear error.
const (
	// maxVisits is how many YAML nodes one file may make the reader look at,
	// counting every expansion of an alias.
	maxVisits = 100_000
	// maxDepth is how deep descriptors may nest (and merge keys chain).
	maxDepth = 64
	// maxErrors is how many problems one file reports before giving up.
	maxErrors = 100
)

// reader walks the yaml.v3 node tree of one file, collecting every problem
// as an *Error instead of stopping at the first. It is used by one goroutine.
type reader struct {
	file   string
	errs   Errors
	visits int
	// halted is set once a bound is hit: from then on nothing more is read
	// and no further error is recorded, so a single clear error explains it.
	halted bool
	// limits remembers where each parsed limit came from, for the checks
	// that span the whole domain (names, replaces).
	limits []limitSource
}

// pair is one key of a mapping with its value, aliases resolved.
type pair struct {
	name string     // the key's text
	key  *yaml.Node // the key node (for positions)
	val  *yaml.Node // the value node, aliases resolved; nil if halted
}

func (r *reader) pos(n *yaml.Node) Pos {
	p := Pos{File: r.file}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	return p
}

// errorf records a problem at n (nil: the whole file).
func (r *reader) errorf(n *yaml.Node, field, format string, args ...any) {
	r.errorAt(r.pos(n), field, fmt.Sprintf(format, args...))
}

func (r *reader) errorAt(p Pos, field, msg string) {
	if r.halted {
		return
	}
	if len(r.errs) == maxErrors {
		r.errs = append(r.errs, &Error{Pos: p, Msg: fmt.Sprintf("more than %d problems; fix these first", maxErrors)})
		r.halted = true
		return
	}
	r.errs = append(r.errs, &Error{Pos: p, Field: shorten(field), Msg: msg})
}

// halt records err and stops the reader.
func (r *reader) halt(n *yaml.Node, field, msg string) {
	r.errorAt(r.pos(n), field, msg)
	r.halted = true
}

// deref returns the node n stands for, following an alias, and charges one
// visit. It returns nil once the reader has halted.
func (r *reader) deref(n *yaml.Node) *yaml.Node {
	if r.halted || n == nil {
		return nil
	}
	r.visits++
	if r.visits > maxVisits {
		r.halt(n, "", fmt.Sprintf("the file expands to more than %d YAML nodes (through aliases?); write the policy out plainly", maxVisits))
		return nil
	}
	if n.Kind == yaml.AliasNode {
		// yaml.v3 anchors never sit on aliases: one step resolves.
		return n.Alias
	}
	return n
}

// pairs returns the keys of mapping m in document order, then the keys
// brought in by merge keys (<<) that m does not set itself. It reports keys
// that are not strings and keys given twice. depth bounds merge chains.
func (r *reader) pairs(m *yaml.Node, field string, depth int) []pair {
	if depth > maxDepth {
		r.halt(m, field, fmt.Sprintf("merge keys (<<) chain deeper than %d levels (does an alias refer to its own mapping?)", maxDepth))
		return nil
	}
	var out []pair
	seen := map[string]*yaml.Node{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(m.Content) && !r.halted; i += 2 {
		k, v := r.deref(m.Content[i]), m.Content[i+1]
		if k == nil {
			return out
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			r.errorf(k, field, "key %s is not a string (keys are names such as key, value or rate_limit)", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			r.errorf(k, join(field, k.Value), "%s is given twice in this mapping (first at line %d); keep one", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		out = append(out, pair{name: k.Value, key: k, val: r.deref(v)})
	}
	// Merge keys: explicit keys win, then earlier sources over later ones
	// (the YAML merge-key rule, as yaml.v2 applies it upstream).
	for _, v := range merges {
		for _, src := range r.mergeSources(v, field) {
			for _, p := range r.pairs(src, field, depth+1) {
				if _, dup := seen[p.name]; !dup {
					seen[p.name] = p.key
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// mergeSources returns the mappings a merge key's value names: a mapping or
// a list of mappings.
func (r *reader) mergeSources(v *yaml.Node, field string) []*yaml.Node {
	v = r.deref(v)
	if v == nil {
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{v}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, e := range v.Content {
			if e = r.deref(e); e == nil {
				return out
			}
			if e.Kind != yaml.MappingNode {
				r.errorf(e, field, "a merge key (<<) takes a mapping or a list of mappings, not %s", describe(e))
				continue
			}
			out = append(out, e)
		}
		return out
	}
	r.errorf(v, field, "a merge key (<<) takes a mapping or a list of mappings, not %s", describe(v))
	return nil
}

// isNull reports whether n is absent or an explicit null (`key:`, `~`): like
// yaml.v2 upstream, a null value means the field is not set.
func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// str reads a string field. Like upstream (yaml.v2 decoding into a string),
// an unquoted number, boolean or date is taken as its text; a float is
// rejected, as upstream's key check rejects it.
func (r *reader) str(n *yaml.Node, field, name string) (string, bool) {
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		r.errorf(n, field, "%s must be a string, not %s (write one value, quoted if needed: %s: \"...\")", name, describe(n), name)
		return "", false
	}
	switch n.ShortTag() {
	case "!!float":
		r.errorf(n, field, "%s must be a string, not the number %s (quote it: %s: %q)", name, n.Value, name, n.Value)
		return "", false
	case "!!binary":
		var s string
		if err := n.Decode(&s); err != nil {
			r.errorf(n, field, "%s must be a string; this !!binary value does not decode (%v)", name, err)
			return "", false
		}
		return s, true
	}
	return n.Value, true
}

// yaml11Bools are the unquoted words yaml.v2 (and so upstream) reads as
// booleans; yaml.v3 reads only true and false so.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false,
	"off": false, "Off": false, "OFF": false,
}

// boolean reads a boolean field; null is false.
func (r *reader) boolean(n *yaml.Node, field, name string) (bool, bool) {
	if isNull(n) {
		return false, true
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case "!!str":
			if b, ok := yaml11Bools[n.Value]; ok && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle|yaml.TaggedStyle) == 0 {
				return b, true
			}
		}
	}
	r.errorf(n, field, "%s must be true or false, not %s (write %s: true)", name, describe(n), name)
	return false, false
}

// uint32Field reads a whole number in 0..2^32-1; null is 0.
func (r *reader) uint32Field(n *yaml.Node, field, name string) (uint32, bool) {
	if isNull(n) {
		return 0, true
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var i int64
		if n.Decode(&i) == nil && i >= 0 && i <= 1<<32-1 {
			return uint32(i), true
		}
	}
	r.errorf(n, field, "%s must be a whole number from 0 to 4294967295, not %s", name, describe(n))
	return 0, false
}

// describe names a node for a message: `the string "ten"`, `-1`, `a list`.
func describe(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!str":
		return "the string " + quote(n.Value)
	case "!!int", "!!float", "!!bool":
		return n.Value
	}
	return quote(n.Value)
}

// quote quotes s for a message, shortening a long one.
func quote(s string) string {
	const max = 60
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// join appends a mapping key to a field path.
func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// index appends a list index to a field path.
func index(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}

// list renders names as "a, b or c".
func list(names []string) string { return enumerate(names, " or ") }

// listAll renders names as "a, b and c".
func listAll(names []string) string { return enumerate(names, " and ") }

func enumerate(names []string, last string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + last + names[len(names)-1]
}

// shorten keeps a field path readable: a path through dozens of nested
// descriptors keeps its start and its end.
func shorten(field string) string {
	const max = 160
	if len(field) <= max {
		return field
	}
	return field[:60] + "..." + field[len(field)-90:]
}
