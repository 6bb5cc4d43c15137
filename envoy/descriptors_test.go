package envoy_test

import (
	"path"
	"sort"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/throttlekit/throttlekit/pkg/policy"
)

// shippedPolicy is the policy directory docker-compose.yaml mounts beside
// envoy.yaml.
const shippedPolicy = "../config"

// sentEntry is one descriptor entry a rate_limits action sends: its key, and
// its value when the action fixes one ("" for a value read from the request).
type sentEntry struct{ key, value string }

// TestShippedPolicyMatchesWhatEnvoySends (issue 32, item 9): every descriptor
// envoy.yaml's route sends (domain edge) reaches a rule of the shipped
// policy's domain edge, and every rule of that domain can be reached by an
// entry envoy.yaml sends. Before, envoy.yaml sent (client_id, …) and
// (generic_key, edge), which no shipped rule matched, and config/edge.yaml's
// (header_match, crawler) rule waited for an action envoy.yaml never sent.
func TestShippedPolicyMatchesWhatEnvoySends(t *testing.T) {
	b, _ := loadBootstrap(t)
	set, err := policy.Load(shippedPolicy)
	if err != nil {
		t.Fatalf("the shipped policy does not load: %v", err)
	}
	var edge *policy.Domain
	for _, d := range set.Domains {
		if d.Name == "edge" {
			edge = d
		}
	}
	if edge == nil {
		t.Fatalf("%s has no domain edge, the domain envoy.yaml's rate limit filter asks", shippedPolicy)
	}

	var sent []sentEntry
	for _, rt := range connectionManager(t, b).GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		for _, rl := range rt.GetRoute().GetRateLimits() {
			if len(rl.GetActions()) != 1 {
				t.Fatalf("a rate_limits entry of %d actions: this test checks one-entry descriptors only; extend it", len(rl.GetActions()))
			}
			sent = append(sent, entrySent(t, rl.GetActions()[0]))
		}
	}
	if len(sent) == 0 {
		t.Fatal("envoy.yaml sends no descriptor")
	}

	reached := map[*policy.Descriptor]bool{}
	for _, e := range sent {
		var hits []*policy.Descriptor
		for _, d := range edge.Descriptors {
			if d.Key == e.key && (e.value == "" || d.Value == "" || valueMatches(d.Value, e.value)) {
				hits = append(hits, d)
			}
		}
		if len(hits) == 0 {
			t.Errorf("envoy.yaml sends (%s, %s), which no rule of domain edge in %s matches: add a rule or drop the action", e.key, orAny(e.value), edge.File)
		}
		for _, d := range hits {
			reached[d] = true
		}
	}
	var unreached []string
	for _, d := range edge.Descriptors {
		if !reached[d] {
			unreached = append(unreached, "("+d.Key+", "+orAny(d.Value)+")")
		}
	}
	sort.Strings(unreached)
	for _, u := range unreached {
		t.Errorf("rule %s of %s: envoy.yaml sends no descriptor it can match; add the action or drop the rule", u, edge.File)
	}
}

// entrySent is the entry one action sends.
func entrySent(t *testing.T, a *routev3.RateLimit_Action) sentEntry {
	t.Helper()
	key := actionKey(t, a)
	switch {
	case a.GetGenericKey() != nil:
		return sentEntry{key, a.GetGenericKey().GetDescriptorValue()}
	case a.GetHeaderValueMatch() != nil:
		return sentEntry{key, a.GetHeaderValueMatch().GetDescriptorValue()}
	}
	return sentEntry{key: key}
}

// valueMatches reports whether a rule's value (with '*' wildcards) matches a
// fixed value an action sends.
func valueMatches(rule, value string) bool {
	ok, err := path.Match(rule, value)
	return err == nil && ok || rule == value
}

func orAny(v string) string {
	if v == "" {
		return "<any>"
	}
	return v
}
