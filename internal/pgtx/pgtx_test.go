package pgtx

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// identifier is PlainIdentifier's naive reference.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// FuzzPlainIdentifier: PlainIdentifier never panics, accepts exactly the
// plain lowercase identifiers of at most max bytes, and a table named from
// an accepted prefix is quoted by pgx verbatim, so the SQL a coordinator
// builds names that table.
func FuzzPlainIdentifier(f *testing.F) {
	const max = 48
	for _, s := range []string{"", "throttlekit_adaptive", "_", "a1", "1a", "A", "a-b", "a.b", `a"b`, "é", "a\x00", "select", strings.Repeat("a", max), strings.Repeat("a", max+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		ok := PlainIdentifier(name, max)
		if want := len(name) <= max && identifier.MatchString(name); ok != want {
			t.Fatalf("PlainIdentifier(%q) = %v, want %v", name, ok, want)
		}
		if ok {
			table := name + "_nodes"
			if q := (pgx.Identifier{table}).Sanitize(); q != `"`+table+`"` {
				t.Fatalf("accepted %q quotes as %s", name, q)
			}
		}
	})
}
