package policy

import (
	"cmp"
	"slices"
)

// checkDomain runs the checks that span a whole domain once every limit is
// read: limit names are unique, and every replaces entry names a limit.
func (r *reader) checkDomain(d *Domain) {
	if d == nil || r.halted {
		return
	}
	named := map[string]limitSource{}
	for _, src := range r.limits {
		name := src.limit.Name
		if src.nameNode == nil || name == "" {
			continue
		}
		if first, dup := named[name]; dup {
			r.errorf(src.nameNode, join(src.field, "name"), "limit name %s is already used by the limit at line %d; names must be unique within a domain (rename one)", quote(name), first.nameNode.Line)
			continue
		}
		named[name] = src
	}
	for _, src := range r.limits {
		for i, target := range src.limit.Replaces {
			if target == src.limit.Name {
				continue // reported where the limit was read
			}
			if _, ok := named[target]; !ok {
				r.errorf(src.replaceNodes[i], src.replaceFields[i], "replaces %s, but no limit in domain %s is named %s (check the spelling, or give that limit name: %s)", quote(target), quote(d.Name), quote(target), target)
			}
		}
	}
}

// sortErrors orders errors by file, line and column, keeping the order of
// errors at one place.
func sortErrors(es Errors) {
	slices.SortStableFunc(es, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Column, b.Pos.Column),
		)
	})
}
