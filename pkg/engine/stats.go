package engine

import (
	"sync"
	"sync/atomic"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// MaxMetricValues bounds the descriptor values a detailed_metric or
// value_to_metric rule keeps counters for; later values are counted under
// OtherValue.
const MaxMetricValues = 100

// OtherValue is the value label of decisions past MaxMetricValues.
const OtherValue = "_other"

// Decisions counts a rule's verdicts. NearLimit is a subset of OK: admitted
// with less than a fifth of the limit left. Shadow counts denials a shadow
// rule did not enforce.
type Decisions struct {
	OK, OverLimit, NearLimit, Shadow int64
}

// Charges counts a rule's charges (Descriptor.HitsAddend set): CheckOnly
// those of 0 units, Charged those of more, and OverrunUnits the units the
// latter counted past the limit.
type Charges struct {
	CheckOnly, Charged, OverrunUnits int64
}

// UpstreamHits counts a rule's hits as envoyproxy/ratelimit's statistics
// do (its base_limiter.go), for the metrics it names
// ratelimit.service.rate_limit.DOMAIN.KEY.*: every hit (TotalHits); hits
// within the limit (WithinLimit); those of them past the near-limit
// threshold, ⌊0.8 × the limit⌋ (NearLimit); hits past the limit
// (OverLimit); and, in shadow mode, the over-limit hits answered OK
// (ShadowMode). A request that crosses a threshold splits its hits as
// upstream does. One difference stands: a denied request consumes nothing
// here, so the hits upstream would still have counted into the window do
// not raise the next request's count.
type UpstreamHits struct {
	TotalHits, WithinLimit, NearLimit, OverLimit, ShadowMode int64
}

type ruleStats struct {
	ok, over, near, shadow         atomic.Int64
	upTotal, upWithin, upNear      atomic.Int64
	upOver, upShadow               atomic.Int64
	checkOnly, charged, overrunned atomic.Int64
	mu                             sync.Mutex
	values                         map[string]*Decisions // guarded by mu; at most MaxMetricValues+1 keys
	cost                           costCounters          // reservations and settlements (reserve.go)
}

// statsFor returns the counters of ref, the same ones across reloads.
func (e *Engine) statsFor(ref RuleRef) *ruleStats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	s := e.stats[ref]
	if s == nil {
		s = &ruleStats{}
		e.stats[ref] = s
	}
	return s
}

// record counts the verdicts of a decided request.
func (e *Engine) record(req *Request, hits []hit) {
	for j := range hits {
		h := &hits[j]
		if h.r.stats == nil {
			continue // a request's override: no rule of the policy to count for
		}
		var d Decisions
		switch {
		case h.over && h.shadow():
			d.Shadow = 1
		case h.over:
			d.OverLimit = 1
		default:
			d.OK = 1
			if lim := h.r.info.RequestsPerUnit; !h.r.unlimited && lim > 0 && int64(h.status.Remaining)*5 < int64(lim) {
				d.NearLimit = 1
			}
		}
		s := h.r.stats
		if e.opts.UpstreamHits {
			s.countUpstream(h)
		}
		if h.charge {
			if h.cost == 0 {
				s.checkOnly.Add(1)
			} else {
				s.charged.Add(1)
			}
			if h.d.Overrun > 0 {
				s.overrunned.Add(h.d.Overrun)
			}
		}
		// One atomic add per verdict: these counters are shared by every
		// request of the rule.
		switch {
		case d.Shadow != 0:
			s.shadow.Add(1)
		case d.OverLimit != 0:
			s.over.Add(1)
		default:
			s.ok.Add(1)
			if d.NearLimit != 0 {
				s.near.Add(1)
			}
		}
		if h.r.metricValue {
			entries := req.Descriptors[h.desc].Entries
			s.addValue(entries[len(entries)-1].Value, d)
		}
	}
}

// countUpstream counts h's hits as envoyproxy/ratelimit does
// (UpstreamHits), from the limit and what h's status left: admitted, the
// count after it is the limit less what is left; denied, it consumed
// nothing, so the count before it is.
func (s *ruleStats) countUpstream(h *hit) {
	hits := h.cost
	if h.r.unlimited || hits <= 0 {
		return
	}
	limit := int64(h.r.info.RequestsPerUnit)
	left := h.d.Remaining // what the limit had left after it (a denial's: before it)
	var before, after int64
	if h.over {
		before = max(limit-left, 0)
		after = before + hits
	} else {
		after = limit - left
		before = max(after-hits, 0)
	}
	near := int64(float64(float32(limit) * 0.8)) // upstream: ⌊float32(limit) × ratio⌋
	s.upTotal.Add(hits)
	if after > limit {
		over := hits
		if before < limit {
			over = after - limit
			s.upNear.Add(limit - max(near, before))
		}
		s.upOver.Add(over)
		if h.shadow() {
			s.upShadow.Add(over)
		}
		return
	}
	if after > near {
		if before >= near {
			s.upNear.Add(hits)
		} else {
			s.upNear.Add(after - near)
		}
	}
	s.upWithin.Add(hits)
}

func (s *ruleStats) addValue(v string, d Decisions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.values == nil {
		s.values = map[string]*Decisions{}
	}
	c := s.values[v]
	if c == nil {
		if len(s.values) >= MaxMetricValues {
			v = OtherValue
		}
		if c = s.values[v]; c == nil {
			c = &Decisions{}
			s.values[v] = c
		}
	}
	c.OK += d.OK
	c.OverLimit += d.OverLimit
	c.NearLimit += d.NearLimit
	c.Shadow += d.Shadow
}

// RuleSnapshot is what a metrics collector reads of one rule of the policy
// in use.
type RuleSnapshot struct {
	Ref       RuleRef
	Mode      gale.Mode
	Algorithm string // "unlimited" and "blocked" for the rules that never count
	Decisions Decisions
	// Charges counts the rule's charges and check-only calls.
	Charges Charges
	// Values holds per-value counters of detailed_metric / value_to_metric
	// rules (at most MaxMetricValues values and OtherValue).
	Values map[string]Decisions
	// Limiter is the limiter's counters; zero for unlimited and blocked rules.
	Limiter gale.Stats
	// Path is the rule's descriptor path as envoyproxy/ratelimit names its
	// statistics: each level's key, or key_value where the policy gives a
	// value (ratelimit.service.rate_limit.DOMAIN.PATH...); Upstream its
	// hits counted as upstream counts them.
	Path     []string
	Upstream UpstreamHits
	// FairShares are a fair rule's tenants' shares of the current window,
	// summed over its counters: at most MaxMetricValues tenants by name, the
	// rest under OtherValue, and the overflow accounts of the tenants past
	// the rule's max_tenants under fair.Overflow ("_overflow").
	FairShares map[string]int64
}

// Snapshot reads the counters of every rule of the policy in use.
func (e *Engine) Snapshot() []RuleSnapshot {
	c := e.cur.Load()
	out := make([]RuleSnapshot, 0, len(c.rules))
	for _, r := range c.rules {
		s := RuleSnapshot{Ref: r.ref, Algorithm: r.galeRule.Algorithm.String()}
		switch {
		case r.unlimited:
			s.Algorithm = "unlimited"
		case r.blocked:
			s.Algorithm = "blocked"
		}
		s.Decisions = Decisions{OK: r.stats.ok.Load(), OverLimit: r.stats.over.Load(), NearLimit: r.stats.near.Load(), Shadow: r.stats.shadow.Load()}
		s.Charges = Charges{CheckOnly: r.stats.checkOnly.Load(), Charged: r.stats.charged.Load(), OverrunUnits: r.stats.overrunned.Load()}
		s.Path = r.statPath
		s.Upstream = UpstreamHits{TotalHits: r.stats.upTotal.Load(), WithinLimit: r.stats.upWithin.Load(), NearLimit: r.stats.upNear.Load(),
			OverLimit: r.stats.upOver.Load(), ShadowMode: r.stats.upShadow.Load()}
		if r.limiter != nil {
			s.Mode = r.limiter.Mode()
			s.Limiter = r.limiter.Stats()
		}
		if r.fair != nil {
			s.Algorithm = "fair"
			s.FairShares = r.fair.shares()
		}
		r.stats.mu.Lock()
		if len(r.stats.values) > 0 {
			s.Values = make(map[string]Decisions, len(r.stats.values))
			for v, d := range r.stats.values {
				s.Values[v] = *d
			}
		}
		r.stats.mu.Unlock()
		out = append(out, s)
	}
	return out
}
