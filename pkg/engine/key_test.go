package engine

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// TestCounterKeyIsInjective: for random (domain, rule, entries) tuples built
// from the bytes that break naive encodings (separators, digits, braces,
// NULs), two different tuples never share a key — checked against the tuples
// themselves as the naive reference.
func TestCounterKeyIsInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	word := words(rng, "ab:_.{}|0123456789\x00 ", 5)
	seen := map[string]string{}
	for i := 0; i < 200000; i++ {
		n := 1 + rng.IntN(3)
		keys, values := make([]string, n), make([]string, n)
		for j := range keys {
			keys[j], values[j] = word(), word()
		}
		domain, rule := word(), word()
		tuple := strings.Join(append(append([]string{domain, rule}, keys...), values...), "\xff") + "|" + string(rune('0'+n))
		k := counterKey(nil, domain, rule, keys, values)
		if prev, ok := seen[k]; ok && prev != tuple {
			t.Fatalf("key %q shared by %q and %q", k, prev, tuple)
		}
		seen[k] = tuple
	}
}

func TestGlobAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	gen := func(alpha string, n int) string {
		b := make([]byte, rng.IntN(n))
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(b)
	}
	for i := 0; i < 100000; i++ {
		p, s := gen("ab*", 6), gen("ab", 8)
		if got, want := glob(p, s), naiveGlob(p, s); got != want {
			t.Fatalf("glob(%q, %q) = %v, want %v", p, s, got, want)
		}
	}
}

// naiveGlob is the obvious recursive definition of '*' matching.
func naiveGlob(p, s string) bool {
	if p == "" {
		return s == ""
	}
	if p[0] == '*' {
		for i := 0; i <= len(s); i++ {
			if naiveGlob(p[1:], s[i:]) {
				return true
			}
		}
		return false
	}
	return s != "" && s[0] == p[0] && naiveGlob(p[1:], s[1:])
}

// TestSplitTenantUndoesTheTenantField: a fair rule's key is its counter's
// key and the tenant as one more field; splitTenant gives both back, for
// values made of the bytes that break naive parsers.
func TestSplitTenantUndoesTheTenantField(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	word := words(rng, "ab:_0123456789\x00", 14)
	for i := 0; i < 100000; i++ {
		n := 1 + rng.IntN(3)
		keys, values := make([]string, n), make([]string, n)
		for j := range keys {
			keys[j], values[j] = word(), word()
		}
		counter := string(appendKey(nil, word(), word(), keys, values))
		tenant := word()
		gotCounter, gotTenant := splitTenant(string(appendField([]byte(counter), tenant)))
		if gotCounter != counter || gotTenant != tenant {
			t.Fatalf("split(%q + %q) = %q, %q", counter, tenant, gotCounter, gotTenant)
		}
	}
	for _, bad := range []string{"", "x", "3:ab", ":", "99999999999999999999:a"} {
		if c, tn := splitTenant(bad); c != bad || tn != "" {
			t.Fatalf("split(%q) = %q, %q; want it whole", bad, c, tn)
		}
	}
}

// TestRuleKeyIsCounterKey: the key built from what compile encodes once (a
// rule's prefix, its branches' key fields) is byte for byte the counter key
// of the same domain, rule and entries.
func TestRuleKeyIsCounterKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	word := words(rng, "ab:_0123456789\x00", 14)
	for i := 0; i < 20000; i++ {
		n := 1 + rng.IntN(4)
		keys, values, path := make([]string, n), make([]string, n), make([]*branch, n)
		for j := range keys {
			keys[j], values[j] = word(), word()
			path[j] = &branch{key: keys[j], keyField: string(appendField(nil, keys[j]))}
		}
		domain, rule := word(), word()
		prefix := string(appendField(appendField(nil, domain), rule))
		if got, want := string(appendRuleKey(nil, prefix, path, values)), counterKey(nil, domain, rule, keys, values); got != want {
			t.Fatalf("rule key %q, counter key %q", got, want)
		}
	}
}

// words returns a generator of strings shorter than max drawn from alphabet:
// the bytes that break naive key encodings.
func words(rng *rand.Rand, alphabet string, max int) func() string {
	return func() string {
		b := make([]byte, rng.IntN(max))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
}

// TestCounterIDIsWhatItCounts: a counter's identity changes with its
// domain, descriptor path, period and algorithm, and with nothing else (a
// limit's figures); paths that a naive join would merge stay apart.
func TestCounterIDIsWhatItCounts(t *testing.T) {
	path := func(kv ...string) string {
		var b []byte
		for _, s := range kv {
			b = appendField(b, s)
		}
		return string(b)
	}
	perDay := gale.Rule{Algorithm: gale.FixedWindow, Limit: 500, Period: 24 * time.Hour}
	id := counterID("d", path("user", ""), perDay)
	same := []gale.Rule{
		{Algorithm: gale.FixedWindow, Limit: 300, Period: 24 * time.Hour},
		{Algorithm: gale.FixedWindow, Limit: 1 << 40, Period: 24 * time.Hour},
	}
	for _, r := range same {
		if got := counterID("d", path("user", ""), r); got != id {
			t.Errorf("%v: identity %s, want %s (figures are not counted)", r, got, id)
		}
	}
	bucket := gale.Rule{Algorithm: gale.GCRA, Limit: 50, Period: time.Second, Burst: 100}
	if counterID("d", path("user", ""), bucket) != counterID("d", path("user", ""), gale.Rule{Algorithm: gale.GCRA, Limit: 10, Period: time.Second, Burst: 99}) {
		t.Error("a bucket's rate and burst changed its identity")
	}
	other := map[string]string{
		"domain":    counterID("e", path("user", ""), perDay),
		"key":       counterID("d", path("team", ""), perDay),
		"value":     counterID("d", path("user", "u"), perDay),
		"depth":     counterID("d", path("user", "", "user", ""), perDay),
		"period":    counterID("d", path("user", ""), gale.Rule{Algorithm: gale.FixedWindow, Limit: 500, Period: time.Hour}),
		"algorithm": counterID("d", path("user", ""), gale.Rule{Algorithm: gale.SlidingWindow, Limit: 500, Period: 24 * time.Hour}),
		"a_b alone": counterID("d", path("a_b", ""), perDay),
		"a then b":  counterID("d", path("a", "b"), perDay),
	}
	seen := map[string]string{id: "the base"}
	for what, got := range other {
		if was, dup := seen[got]; dup {
			t.Errorf("%s: identity %s, the same as %s", what, got, was)
		}
		seen[got] = what
	}
}
