package boundcheck

import (
	"maps"
	"slices"
	"strings"
)

// Table renders the rows of the tables given (Rows, and the rows other
// parts of the checker judge by) as one Markdown table with the columns
// row, most and least: the tables in the order given, each one's rows in
// the order of their keys. docs/engine.md carries Table(Tables()...)
// (TestBoundsTableInDocs).
func Table(tables ...map[string]Row) string {
	var b strings.Builder
	b.WriteString("| row | most | least |\n| --- | --- | --- |\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, t := range tables {
		for _, k := range slices.Sorted(maps.Keys(t)) {
			r := t[k]
			b.WriteString("| " + cell(r.Name) + " | " + cell(r.Most) + " | " + cell(r.Least) + " |\n")
		}
	}
	return b.String()
}

// Tables are the row sets the checker judges by, in the order
// docs/engine.md shows them: a new set is one more entry.
func Tables() []map[string]Row {
	return []map[string]Row{Rows, FederationRows, RLQSRows}
}
