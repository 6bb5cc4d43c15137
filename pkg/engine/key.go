package engine

import "strconv"

// Keys. A counter's key is the concatenation of length-prefixed fields:
//
//	len(domain) ":" domain  len(rule) ":" rule  { len(key) ":" key  len(value) ":" value }
//
// where rule is the rule's fingerprint. The length prefix makes the encoding
// injective: no descriptor value, whatever bytes it holds (colons, digits,
// braces, NULs), can make two different (domain, rule, entries) share a key.
//
// A fair rule counts every tenant in one counter, whose key leaves the
// tenant's value out (an empty field); the key the engine hands the rule's
// limit is that counter's key followed by the tenant as one more field
// (fairKey), which splitTenant takes apart again.

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
