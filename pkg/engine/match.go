package engine

import "strings"

// node is one level of a domain's compiled descriptor tree.
type node struct {
	exact    map[entryKey]*branch // key and value given in the policy
	wildcard []*branch            // value with '*', in policy order
	keyOnly  map[string]*branch   // key with no value: any value, each its own counter
}

type entryKey struct{ key, value string }

// branch is one policy descriptor: its limits and its children.
type branch struct {
	key, value string
	keyField   string   // key as a counter key's field (appendField)
	wild       bool     // value holds '*'
	parts      []string // value split on '*', for glob
	share      bool     // share_threshold: every matching value shares one counter
	rules      []*rule
	next       *node // nil without nested descriptors
}

func newNode() *node {
	return &node{exact: map[entryKey]*branch{}, keyOnly: map[string]*branch{}}
}

// match walks root with a request descriptor's entries, as
// envoyproxy/ratelimit does: at each level the exact (key, value) first,
// then the first wildcard of that key whose pattern matches, then the key
// alone; a rule applies only at the level of the last entry (the request's
// depth must equal the rule's). It fills path with the branch of each level
// and returns the branch holding the rules, or nil.
func (root *node) match(entries []Entry, path []*branch) (*branch, []*branch) {
	n := root
	for i, e := range entries {
		b := n.step(e.Key, e.Value)
		if b == nil {
			return nil, path
		}
		path = append(path, b)
		if i == len(entries)-1 {
			if len(b.rules) == 0 {
				return nil, path
			}
			return b, path
		}
		if b.next == nil {
			return nil, path
		}
		n = b.next
	}
	return nil, path
}

// step is the branch of n that entry (key, value) matches, as match and
// matchBucket take it: the exact pair, then the first wildcard of that key
// that matches, then the key alone; nil if none.
func (n *node) step(key, value string) *branch {
	if b := n.exact[entryKey{key, value}]; b != nil {
		return b
	}
	for _, w := range n.wildcard {
		if w.key == key && globParts(w.parts, value) {
			return w
		}
	}
	return n.keyOnly[key]
}

// glob reports whether s matches pattern, where '*' matches any run of bytes
// (possibly empty) and every other byte matches itself.
func glob(pattern, s string) bool { return globParts(strings.Split(pattern, "*"), s) }

// globParts is glob with the pattern split on '*' beforehand (compiled once
// per policy). The first part must be a prefix, the last a suffix, and the
// middle parts must appear in order between them; taking each middle part at
// its leftmost place is optimal, so one pass decides, in O(len(s)·parts).
func globParts(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}
