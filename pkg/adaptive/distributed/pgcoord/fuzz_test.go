package pgcoord

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// identifier is checkTable's naive reference.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// FuzzTableName: checkTable never panics, accepts exactly the plain
// lowercase identifiers of at most MaxTable bytes, and every name it
// accepts is quoted by pgx verbatim, so the SQL New builds is the name.
func FuzzTableName(f *testing.F) {
	for _, s := range []string{"", DefaultTable, "_", "a1", "1a", "A", "a-b", "a.b", `a"b`, "é", "a\x00", "select", strings.Repeat("a", MaxTable), strings.Repeat("a", MaxTable+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := checkTable(name)
		want := len(name) <= MaxTable && identifier.MatchString(name)
		if (err == nil) != want {
			t.Fatalf("checkTable(%q) = %v, want accepted %v", name, err, want)
		}
		if err == nil {
			for _, table := range []string{name + "_gates", name + "_nodes"} {
				if q := (pgx.Identifier{table}).Sanitize(); q != `"`+table+`"` {
					t.Fatalf("accepted %q quotes as %s", name, q)
				}
			}
		}
	})
}
