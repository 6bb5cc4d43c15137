package policy_test

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// model is a deliberately naive reference of the decisions the compat
// samples assume (config/compat/README.md): envoyproxy/ratelimit's matching
// by a linear scan of each level, and the counting of pkg/gale's pure
// strategies on a map of states. It checks that the hand-written
// expectations agree with the written semantics; the engine's runner checks
// the engine against the same files.
type model struct {
	domains map[string]*policy.Domain
	now     time.Time
	states  map[string]gale.State
}

// compatStart is the instant every sample starts at.
var compatStart = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func newModel(set *policy.Set) *model {
	m := &model{domains: map[string]*policy.Domain{}, now: compatStart, states: map[string]gale.State{}}
	for _, d := range set.Domains {
		m.domains[d.Name] = d
	}
	return m
}

type answer struct {
	overall  string
	statuses []status
}

type status struct {
	code      string
	remaining uint32
	limit     *policy.Limit
	reset     time.Duration
}

// match walks the tree as upstream's GetLimit does: per level the exact
// value, then the first matching wildcard, then the key-only rule; no
// backtracking; a rule applies only at the request's last entry. It returns
// the rule and the descriptor's counter key.
func (m *model) match(domain string, entries []entry) (*policy.Descriptor, string) {
	dom := m.domains[domain]
	if dom == nil {
		return nil, ""
	}
	level := dom.Descriptors
	key := domain
	for i, e := range entries {
		var next *policy.Descriptor
		counted := e.Value
		for _, d := range level {
			if d.Key == e.Key && d.Value != "" && d.Value == e.Value {
				next = d
				break
			}
		}
		if next == nil {
			for _, d := range level {
				if d.Key == e.Key && d.HasWildcard() && glob(d.Value, e.Value) {
					next = d
					if d.ShareThreshold {
						counted = d.Value
					}
					break
				}
			}
		}
		if next == nil {
			for _, d := range level {
				if d.Key == e.Key && d.Value == "" {
					next = d
					break
				}
			}
		}
		key += "\x00" + e.Key + "\x00" + counted
		if next == nil {
			return nil, ""
		}
		if i == len(entries)-1 {
			return next, key
		}
		level = next.Descriptors
	}
	return nil, ""
}

// glob reports whether pattern, where '*' matches any run of bytes, matches
// all of s. Naive recursion: patterns here are tiny.
func glob(pattern, s string) bool {
	before, after, found := strings.Cut(pattern, "*")
	if !found {
		return pattern == s
	}
	if !strings.HasPrefix(s, before) {
		return false
	}
	rest := s[len(before):]
	for i := 0; i <= len(rest); i++ {
		if glob(after, rest[i:]) {
			return true
		}
	}
	return false
}

type limitCheck struct {
	limit *policy.Limit
	key   string
	over  bool
	next  gale.State
	out   gale.Outcome
}

type descriptorCheck struct {
	rule      *policy.Descriptor
	unlimited bool
	checks    []*limitCheck
	over      bool
}

// decide answers one request and charges it when the answer is OK.
func (m *model) decide(c expectCase) answer {
	now := m.now.UnixMicro()
	ds := make([]*descriptorCheck, len(c.Descriptors))
	replaced := map[string]bool{}
	for i, d := range c.Descriptors {
		rule, key := m.match(c.Domain, d.Entries)
		dc := &descriptorCheck{rule: rule}
		ds[i] = dc
		if rule == nil || len(rule.Limits) == 0 {
			continue
		}
		dc.unlimited = true
		for j, l := range rule.Limits {
			for _, r := range l.Replaces {
				replaced[r] = true
			}
			if !l.Unlimited {
				dc.unlimited = false
				dc.checks = append(dc.checks, &limitCheck{limit: l, key: key + "\x00" + strconv.Itoa(j)})
			}
		}
	}

	pending := map[string]gale.State{}
	ans := answer{overall: "OK", statuses: make([]status, len(ds))}
	quotaAll, quotaAny := true, false
	for i, dc := range ds {
		dc.checks = deleteReplaced(dc.checks, replaced)
		hits := int64(1)
		charge := c.Descriptors[i].HitsAddend != nil
		switch {
		case charge:
			hits = int64(*c.Descriptors[i].HitsAddend)
		case c.HitsAddend > 0:
			hits = int64(c.HitsAddend)
		}
		st := &ans.statuses[i]
		st.code = "OK"
		if dc.unlimited {
			st.remaining = math.MaxUint32
			continue
		}
		if len(dc.checks) == 0 {
			continue
		}
		for _, lc := range dc.checks {
			if charge {
				m.charge(lc, now, hits)
			} else {
				m.check(lc, pending, now, hits)
			}
			dc.over = dc.over || lc.over
		}
		shown := dc.checks[0]
		for _, lc := range dc.checks {
			if lc.over || (!shown.over && lc.out.Remaining < shown.out.Remaining) {
				shown = lc
				if lc.over {
					break
				}
			}
		}
		st.limit = shown.limit
		st.reset = time.Duration(shown.out.ResetAt-now) * time.Microsecond
		if !dc.over {
			st.remaining = uint32(shown.out.Remaining)
		}
		switch {
		case dc.rule.ShadowMode:
		case dc.rule.QuotaMode:
			quotaAny = true
			quotaAll = quotaAll && dc.over
			if dc.over {
				st.code = "OVER_LIMIT"
			}
		case dc.over:
			st.code = "OVER_LIMIT"
			ans.overall = "OVER_LIMIT"
		}
	}
	if quotaAny && quotaAll {
		ans.overall = "OVER_LIMIT"
	}
	if ans.overall == "OK" {
		for k, s := range pending {
			m.states[k] = s
		}
	}
	return ans
}

func deleteReplaced(checks []*limitCheck, replaced map[string]bool) []*limitCheck {
	var out []*limitCheck
	for _, lc := range checks {
		if lc.limit.Name == "" || !replaced[lc.limit.Name] {
			out = append(out, lc)
		}
	}
	return out
}

// charge is envoyproxy/ratelimit's INCRBY on one fixed-window limit: the
// hits are counted at once, whatever the request's answer (a charge is
// never refunded), and the limit is over when the count after them is
// above it; 0 hits count nothing.
func (m *model) charge(lc *limitCheck, now, hits int64) {
	l := lc.limit
	period := int64(l.Period() / time.Microsecond)
	ws := now / period * period
	if l.RequestsPerUnit == 0 {
		lc.over = true
		lc.out = gale.Outcome{ResetAt: ws + period}
		return
	}
	if l.Algorithm != policy.FixedWindow {
		panic("the model charges fixed windows only: " + string(l.Algorithm))
	}
	s := m.states[lc.key]
	if s.Window != ws {
		s = gale.State{Window: ws}
	}
	s.Used += hits
	m.states[lc.key] = s
	lc.over = s.Used > int64(l.RequestsPerUnit)
	lc.out = gale.Outcome{Remaining: max(int64(l.RequestsPerUnit)-s.Used, 0), ResetAt: ws + period}
}

// check takes hits from one limit in the pending states.
func (m *model) check(lc *limitCheck, pending map[string]gale.State, now, hits int64) {
	l := lc.limit
	period := int64(l.Period() / time.Microsecond)
	if l.RequestsPerUnit == 0 {
		lc.over = true
		lc.out = gale.Outcome{ResetAt: (now/period + 1) * period}
		return
	}
	algo := map[policy.Algorithm]gale.Algorithm{
		policy.FixedWindow:   gale.FixedWindow,
		policy.SlidingWindow: gale.SlidingWindow,
		policy.GCRA:          gale.GCRA,
		policy.TokenBucket:   gale.TokenBucket,
	}[l.Algorithm]
	rule := gale.Rule{Algorithm: algo, Limit: int64(l.RequestsPerUnit), Period: l.Period(), Burst: int64(l.Burst)}
	s, ok := pending[lc.key]
	if !ok {
		s = m.states[lc.key]
	}
	lc.next, lc.out = rule.Take(s, now, hits, hits)
	lc.over = lc.out.Granted == 0
	if !lc.over {
		pending[lc.key] = lc.next
	}
}
