package engine

import (
	"sync"
	"time"
)

// UnknownDomainLogEvery is how often, at most, the engine logs requests for
// one unknown domain (the domains counted under OtherValue share one pace),
// on the requests' own clock.
const UnknownDomainLogEvery = time.Minute

// unknownDomains counts requests for domains no policy file defines. Such a
// request is answered OK (envoyproxy/ratelimit does the same), so a typo in
// Envoy's domain silently disables rate limiting: the count and the debug
// log say so. The zero value is ready; it is safe for concurrent use.
type unknownDomains struct {
	mu sync.Mutex
	// byDomain holds at most MaxMetricValues domains and OtherValue, so
	// traffic cannot grow it (a domain is at most MaxDomainBytes).
	byDomain map[string]*unknownDomain
}

type unknownDomain struct {
	requests int64
	logged   time.Time // when it was last logged; zero: never
}

// add counts one request for domain at now. It returns the domain's count
// (or OtherValue's) and whether to log it: the first time, and then once
// UnknownDomainLogEvery has passed since it was last logged.
func (u *unknownDomains) add(domain string, now time.Time) (requests int64, log bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.byDomain == nil {
		u.byDomain = map[string]*unknownDomain{}
	}
	d := u.byDomain[domain]
	if d == nil {
		if len(u.byDomain) >= MaxMetricValues {
			domain = OtherValue
		}
		if d = u.byDomain[domain]; d == nil {
			d = &unknownDomain{}
			u.byDomain[domain] = d
		}
	}
	d.requests++
	if d.logged.IsZero() || now.Sub(d.logged) >= UnknownDomainLogEvery {
		d.logged = now
		return d.requests, true
	}
	return d.requests, false
}

// noteUnknownDomain counts a request whose domain no policy defines, and
// logs it at debug level, paced by add.
func (e *Engine) noteUnknownDomain(domain string, now time.Time) {
	if n, log := e.unknown.add(domain, now); log {
		e.log.Debug("unknown domain: no policy file defines it, so the request is OK", "domain", domain, "requests", n)
	}
}

// UnknownDomains returns the number of requests, since New, for each domain
// no policy in place at the time defined: at most MaxMetricValues domains,
// later ones summed under OtherValue. A metrics collector reads it.
func (e *Engine) UnknownDomains() map[string]int64 {
	e.unknown.mu.Lock()
	defer e.unknown.mu.Unlock()
	out := make(map[string]int64, len(e.unknown.byDomain))
	for d, c := range e.unknown.byDomain {
		out[d] = c.requests
	}
	return out
}
