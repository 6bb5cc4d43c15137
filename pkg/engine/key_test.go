package engine

import (
	"math/rand/v2"
	"strings"
	"testing"
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
