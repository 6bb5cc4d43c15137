package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Keys. A counter's key is the concatenation of length-prefixed fields:
//
//	len(domain) ":" domain  len(rule) ":" rule  { len(key) ":" key  len(value) ":" value }
//
// where rule is the rule's counter identity (counterID). The length prefix
// makes the encoding injective: no descriptor value, whatever bytes it holds
// (colons, digits, braces, NULs), can make two different (domain, rule,
// entries) share a key.
//
// A fair rule counts every tenant in one counter, whose key leaves the
// tenant's value out (an empty field); the key the engine hands the rule's
// limit is that counter's key followed by the tenant as one more field
// (fairKey), which splitTenant takes apart again.
//
// A counter is what it counts, and nothing else: the domain, the path of
// descriptors down to the rule (each level's key and value as written in
// the policy: a wildcard pattern, or empty for a key alone), the period
// (unit × unit_multiplier) and the algorithm, whose stored states mean
// different things. A limit's name is a label (metrics, replaces) and its
// place in rate_limits an accident of writing: neither is counted, so a
// reload that names, renames or reorders a limit keeps its counts. Nor are
// its figures (requests_per_unit, burst), as upstream keys a counter by
// domain, descriptor and window only: a reload that changes them keeps the
// count, which the new figures judge (gale.State says how). Two limits of
// one descriptor with one identity would count every request twice in one
// counter: the policy refuses them (policy: "counts the same requests"),
// rather than tell them apart by anything that is not what they count.
//
// Nor is the mode: strict, cached_deny and leased limiters of one rule
// count in the same keys (a federated rule counts at its coordinator). A
// reload that changes a rule builds a new limiter over the same keys, and
// the old one, once no request uses it, returns its leased credits to
// them (handover.go), so they reach the new limiter's counters. These keys
// replaced ones that carried the name or place and a bucket's figures:
// counts restarted once, at that upgrade (README, Reload).

// counterID is the identity of a counter (the rule field of its keys): a
// hash of domain, the descriptor path (descPath: each level's key and value
// as appendField fields) and what the stored state means (algorithm,
// period, calendar), each length-prefixed so no two identities encode
// alike. 64 bits of SHA-256: a collision among a policy's rules is as
// likely as a random one, about 3·10⁻¹² among 10⁴ rules.
func counterID(domain, descPath string, r gale.Rule) string {
	b := appendField(nil, domain)
	b = appendField(b, descPath)
	b = appendField(b, r.Algorithm.String())
	b = appendField(b, strconv.FormatInt(int64(r.Period/time.Microsecond), 10))
	b = appendField(b, r.Calendar.String())
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// appendField appends one length-prefixed field.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// appendKey appends the key of rule's counter for the entries of one request
// descriptor, with the value of each level as the rule counts it (the
// request's value, or the wildcard pattern under share_threshold).
func appendKey(b []byte, domain, ruleID string, keys, values []string) []byte {
	b = appendField(b, domain)
	b = appendField(b, ruleID)
	for i := range keys {
		b = appendField(b, keys[i])
		b = appendField(b, values[i])
	}
	return b
}

// appendRuleKey is appendKey for a rule of the policy, with what is constant
// encoded once at compile time: prefix is the domain's and the rule's fields
// (rule.keyPrefix), and the key of each level is the field of the branch it
// matched (branch.keyField; a branch matches only its own key).
func appendRuleKey(b []byte, prefix string, path []*branch, values []string) []byte {
	b = append(b, prefix...)
	for i, br := range path {
		b = append(b, br.keyField...)
		b = appendField(b, values[i])
	}
	return b
}

// counterKey is appendKey as a string, built in buf.
func counterKey(buf []byte, domain, ruleID string, keys, values []string) string {
	return string(appendKey(buf[:0], domain, ruleID, keys, values))
}

// splitTenant splits a fair rule's key into its counter's key and the
// tenant: the last field. A key that is not a sequence of fields (never one
// the engine built) is returned whole, with no tenant.
func splitTenant(key string) (counter, tenant string) {
	last, value, n := -1, 0, 0
	for i := 0; i < len(key); {
		j := i
		n = 0
		for j < len(key) && key[j] >= '0' && key[j] <= '9' && n <= len(key) {
			n = n*10 + int(key[j]-'0')
			j++
		}
		if j == i || j >= len(key) || key[j] != ':' || n > len(key)-j-1 {
			return key, ""
		}
		last, value, i = i, j+1, j+1+n
	}
	if last < 0 {
		return key, ""
	}
	return key[:last], key[value:]
}
