// Package redact hides the passwords URLs carry, for logs and errors.
package redact

import "net/url"

// URL returns raw with its password replaced by xxxxx: the user
// information's, and a password= parameter's (a Sentinel-managed primary's
// password). A raw that does not parse is "(unparsable URL)", never raw
// itself, which may hold a password.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if q := u.Query(); q.Get("password") != "" {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
