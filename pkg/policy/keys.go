package policy

import (
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"
)

// level is one kind of mapping in a policy file and the keys it takes.
// Upstream checks every key against one flat set, wherever it stands; we
// check each mapping against its own keys, so a key in the wrong place (a
// unit on a descriptor, silently ignored upstream) is an error that says
// where it belongs.
type level struct {
	what string   // "the top level", "a descriptor", ...
	keys []string // in the order the messages list them
	// elsewhere says where a key of another level belongs, seen from here.
	elsewhere func(key string) string
}

// The keys each level takes. Kept apart from the levels so that each level's
// elsewhere can name the others' keys without an initialization cycle.
var (
	topKeys        = []string{"domain", "descriptors", "concurrency", "costs"}
	descriptorKeys = []string{"key", "value", "rate_limit", "rate_limits", "descriptors",
		"shadow_mode", "quota_mode", "detailed_metric", "value_to_metric", "share_threshold",
		"mode", "lease", "on_store_error", "fairness", "federation"}
	limitKeys = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"algorithm", "burst", "unit_multiplier"}
	leaseKeys = []string{"batch", "sizing", "window_coupled", "low_water", "return_idle_after"}
)

var (
	topLevel = &level{
		what: "the top level",
		keys: topKeys,
		elsewhere: func(k string) string {
			switch {
			case slices.Contains(descriptorKeys, k):
				return "it belongs in a descriptor, under descriptors"
			case slices.Contains(limitKeys, k):
				return "it belongs inside a descriptor's rate_limit"
			}
			return ""
		},
	}
	descriptorLevel = &level{
		what: "a descriptor",
		keys: descriptorKeys,
		elsewhere: func(k string) string {
			switch {
			case k == "domain":
				return "it belongs at the top of the file"
			case slices.Contains(limitKeys, k):
				return "it belongs inside rate_limit"
			case slices.Contains(leaseKeys, k):
				return "it belongs inside lease"
			}
			return ""
		},
	}
	limitLevel = &level{
		what: "a rate limit",
		keys: limitKeys,
		elsewhere: func(k string) string {
			switch {
			case slices.Contains(descriptorKeys, k):
				return "it belongs on the descriptor, beside rate_limit"
			case slices.Contains(leaseKeys, k):
				return "it belongs inside the descriptor's lease"
			}
			return ""
		},
	}
	fairLevel = &level{
		what:      "a descriptor's fairness",
		keys:      []string{"tenant_key", "weights", "default_weight", "max_tenants"},
		elsewhere: func(string) string { return "" },
	}
	sizingLevel = &level{
		what:      "a lease's sizing",
		keys:      []string{"order_cost", "strand_penalty"},
		elsewhere: func(string) string { return "" },
	}
	replacesLevel = &level{
		what:      "a replaces entry",
		keys:      []string{"name"},
		elsewhere: func(string) string { return "" },
	}
	leaseLevel = &level{
		what: "a lease",
		keys: leaseKeys,
		elsewhere: func(k string) string {
			switch {
			case slices.Contains(descriptorKeys, k):
				return "it belongs on the descriptor, beside lease"
			case slices.Contains(limitKeys, k):
				return "it belongs inside the descriptor's rate_limit"
			}
			return ""
		},
	}
)

// unknownKey reports key k, which lv does not take.
func (r *reader) unknownKey(k *yaml.Node, field string, lv *level) {
	f := join(field, k.Value)
	if where := lv.elsewhere(k.Value); where != "" {
		r.errorf(k, f, "unknown key %s in %s: %s", quote(k.Value), lv.what, where)
		return
	}
	if s := closest(k.Value, lv.keys); s != "" {
		r.errorf(k, f, "unknown key %s (did you mean %s?)", quote(k.Value), s)
		return
	}
	r.errorf(k, f, "unknown key %s (%s takes %s)", quote(k.Value), lv.what, listAll(lv.keys))
}

// closest returns the name in names nearest to s by edit distance, if it is
// near enough to be a likely typo; "" otherwise.
func closest(s string, names []string) string {
	best, bestD := "", 3
	if len(s) <= 4 {
		bestD = 2
	}
	for _, n := range names {
		if d := editDistance(s, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30 // not a typo of a key name; and keeps the cost bounded
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// enumErr is the message for a value outside an enumeration.
func enumErr(name, got string, want []string) string {
	return fmt.Sprintf("unknown %s %s (want %s)", name, quote(got), list(want))
}
