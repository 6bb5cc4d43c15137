package rediscoord_test

import (
	"strings"
	"testing"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// hostileGates are gate names that would collide, or move the Redis
// Cluster hash tag, under a naive Prefix + "{" + gate + "}".
var hostileGates = []string{
	"", "a", "{a}", "a}", "{a", "}", "{", "{}", "}{", "a}b", "a{b", "a}:{b",
	"a:b", "a:{b}", "%", "%25", "%7D", "%7B", "a%7Db", "a%257Db", "a%", "a}%",
	"tk:conc:{a}", "\x00", "a\x00}", "\xff{\xfe}",
}

// TestKeysOfHostileGates: no two gates share a hash; each key's hash tag is
// its whole escaped gate (the key ends in the tag's one "}"), so a gate is
// one Cluster slot (the empty gate's key, with an empty tag, is hashed
// whole); and heartbeats of one gate never touch another's
// records.
func TestKeysOfHostileGates(t *testing.T) {
	c, rc := newCoordinator(t, rediscoord.Options{})
	seen := map[string]string{}
	for _, gate := range hostileGates {
		key := c.Key(gate)
		if other, ok := seen[key]; ok {
			t.Fatalf("gates %q and %q share the key %q", gate, other, key)
		}
		seen[key] = gate
		tag := hashTag(key)
		if gate == "" {
			continue // an empty tag: Cluster hashes the whole key, still one slot
		}
		if want := strings.TrimSuffix(strings.TrimPrefix(key, rediscoord.DefaultPrefix+"{"), "}"); tag != want || strings.ContainsAny(tag, "{}") {
			t.Fatalf("gate %q: key %q has the hash tag %q, want %q, the escaped gate", gate, key, tag, want)
		}
	}
	for i, gate := range hostileGates {
		rep := distributed.Report{Node: "n", Instance: "i", Seq: 1, Local: i + 1}
		if g, err := c.Heartbeat(ctx, gate, rep, hour, t0); err != nil || g.Global != i+1 || g.Live != 1 || g.Gen != 1 {
			t.Fatalf("gate %q: %s, %v; want a gate of its own", gate, show(g), err)
		}
	}
	for i, gate := range hostileGates {
		recs, err := c.Records(ctx, gate)
		if err != nil || len(recs) != 1 || recs[0].Local != i+1 || recs[0].Gen != 1 {
			t.Fatalf("gate %q: records %+v, %v; want its one record", gate, recs, err)
		}
	}
	if n, err := rc.DBSize(ctx).Result(); err != nil || n != int64(len(hostileGates)) {
		t.Fatalf("%d keys, %v; want one per gate, %d", n, err, len(hostileGates))
	}
}

func TestKeyEscape(t *testing.T) {
	c, _ := newCoordinator(t, rediscoord.Options{})
	for gate, want := range map[string]string{
		"checkout": "tk:conc:{checkout}",
		"":         "tk:conc:{}",
		"a:b/c":    "tk:conc:{a:b/c}",
		"{a}":      "tk:conc:{%7Ba%7D}",
		"a%7Db":    "tk:conc:{a%257Db}",
		"a}b":      "tk:conc:{a%7Db}",
	} {
		if got := c.Key(gate); got != want {
			t.Errorf("Key(%q) = %q, want %q", gate, got, want)
		}
	}
}

// hashTag is what Redis Cluster hashes of key: the part between the first
// "{" and the first "}" after it, when that is not empty; else the key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestHashTag(t *testing.T) {
	for key, want := range map[string]string{
		"{user1000}.following": "user1000", "foo{{bar}}zap": "{bar", "foo{bar}{zap}": "bar", "foo{}{bar}": "foo{}{bar}",
	} {
		if got := hashTag(key); got != want {
			t.Errorf("hashTag(%q) = %q, want %q (the Cluster specification's examples)", key, got, want)
		}
	}
}
