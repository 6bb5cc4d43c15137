package engine

import "strconv"

// Keys. A counter's key is the concatenation of length-prefixed fields:
//
//	len(domain) ":" domain  len(rule) ":" rule  { len(key) ":" key  len(value) ":" value }
//
// where rule is the rule's fingerprint. The length prefix makes the encoding
// injective: no descriptor value, whatever bytes it holds (colons, digits,
// braces, NULs), can make two different (domain, rule, entries) share a key.

// appendField appends one length-prefixed field.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}

// counterKey is the key of rule's counter for the entries of one request
// descriptor, with the value of each level as the rule counts it (the
// request's value, or the wildcard pattern under share_threshold).
func counterKey(buf []byte, domain, ruleID string, keys, values []string) string {
	b := appendField(buf[:0], domain)
	b = appendField(b, ruleID)
	for i := range keys {
		b = appendField(b, keys[i])
		b = appendField(b, values[i])
	}
	return string(b)
}
