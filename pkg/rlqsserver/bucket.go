package rlqsserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// bucket drives one bucket key's machine: it serialises the events (its
// mutex), carries out the actions and keeps the streams subscribed.
type bucket struct {
	srv    *Server
	domain string
	key    string
	id     *rlqspb.BucketId // as Envoy sent it, for the responses

	mu   sync.Mutex
	dead bool // removed from the server; a report must find the new one
	subs map[rlqs.StreamID]*sub

	// What the bucket resolved to, against the resolver's generation
	// policyGen (resolved: there is one). A report resolves the bucket
	// again only when the generation has moved on (a reload), or when the
	// domain was unknown (the engine counts those per report).
	resolved  bool
	policyGen uint64
	kind      ratelimit.QuotaKind
	refused   string // the refusal, when kind is QuotaRefused
	// limits are the limits the bucket counts against (kind QuotaLimited),
	// the machine's first: the shortest window (limits.go).
	limits  []ratelimit.QuotaLimit
	machine rlqs.Machine
	state   rlqs.Bucket
	// windows are each limit's grants of the machine's windows in place,
	// by the window's end as the machine knows it: where units it gives
	// back go (limits.go).
	windows map[time.Time][]ratelimit.QuotaGrant
	// gen counts the machines the bucket has had: a lease that lands on a
	// newer machine than the one that asked it is returned, not landed.
	gen uint64
	// shared is the window (of its first limit, counted from the Unix
	// epoch) whose lease this sidecar has sized by its fair share in the
	// demand ledger (limits.go): later leases in it take what the store
	// has left, first come, so a share another sidecar announced and
	// never took is not lost to the window.
	shared int64
	// timer calls tick at wake (nil: none set since the last reset). It
	// may have fired: the machine never asks for an instant it has already
	// been at (its clock only moves on), so asking for wake again means
	// its tick is still to come.
	timer   clock.Timer
	wake    time.Time
	expired map[rlqs.StreamID]time.Time // the window of each stream's assignment counted as expired
}

// sub is one stream's subscription.
type sub struct {
	st     *stream
	active time.Time // the latest report with a request, or the subscription
}

func newBucket(s *Server, domain, key string, id map[string]string) *bucket {
	return &bucket{srv: s, domain: domain, key: key, id: &rlqspb.BucketId{Bucket: id},
		subs: map[rlqs.StreamID]*sub{}, expired: map[rlqs.StreamID]time.Time{}, windows: map[time.Time][]ratelimit.QuotaGrant{}}
}

// report handles u from str at now. It returns false when the bucket was
// removed meanwhile (the caller takes the new one).
func (b *bucket) report(str *stream, u *usage, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead {
		return false
	}
	s := b.subs[str.id]
	if s == nil {
		s = &sub{st: str, active: now}
		b.subs[str.id] = s
		str.subs[b.key] = b
	} else if idle := b.srv.opts.AbandonIdle; idle > 0 && u.allowed+u.denied == 0 && now.Sub(s.active) >= idle {
		b.abandonLocked(str, now)
		return true
	}
	if u.allowed+u.denied > 0 {
		s.active = now
	}
	if b.resolveIfStaleLocked(u.id, now) {
		return true // every stream told, this one too
	}
	switch b.kind {
	case ratelimit.QuotaLimited:
		b.srv.stats.rule(b.rule(), func(r *RuleStats) {
			r.Allowed += int64(u.allowed)
			r.Denied += int64(u.denied)
		})
		acts, err := b.machine.ReportFrom(&b.state, now, str.id, str.conn, u.allowed, u.denied, u.elapsed)
		if err != nil {
			reason := "counts"
			if errors.Is(err, rlqs.ErrTooManyStreams) {
				reason = "streams"
			}
			b.srv.skip(b.domain, skipped{reason: reason, err: err})
			return true
		}
		b.doLocked(acts, now)
	default:
		b.blanketKindLocked(str)
	}
	return true
}

// resolveIfStaleLocked resolves the bucket against the policy in use
// unless it was resolved at the resolver's current generation. The
// generation is read before resolving, so a reload that races the
// resolution makes the next report resolve again: the bucket never keeps
// an answer older than the generation it records. When a bucket that was
// resolved turns to a blanket answer (a cut to 0, no limit, a refusal),
// every stream subscribed is told at once, not only the one whose report
// noticed: an Envoy under ALLOW_ALL whose DENY_ALL ran out before its own
// next report admitted unmetered meanwhile. It reports whether it told
// them.
func (b *bucket) resolveIfStaleLocked(id map[string]string, now time.Time) (told bool) {
	r := b.srv.opts.Resolver
	g := r.QuotaGeneration()
	if b.resolved && g == b.policyGen {
		return false
	}
	was, prev := b.resolved, b.kind
	q, err := r.ResolveQuota(b.domain, id)
	if err != nil {
		q = ratelimit.Quota{Kind: ratelimit.QuotaRefused, Refused: err}
	}
	b.resolveLocked(q, now)
	b.resolved, b.policyGen = !q.UnknownDomain, g
	b.rejoinLocked(now)
	if !was || b.kind == prev || b.kind == ratelimit.QuotaLimited {
		return false
	}
	for _, s := range b.subs {
		b.blanketKindLocked(s.st)
	}
	return true
}

// blanketKindLocked tells str the blanket answer of the bucket's kind,
// which is not QuotaLimited.
func (b *bucket) blanketKindLocked(str *stream) {
	switch b.kind {
	case ratelimit.QuotaNoLimit:
		b.blanketLocked(str, typev3.RateLimitStrategy_ALLOW_ALL, "no_limit")
	case ratelimit.QuotaBlocked:
		b.blanketLocked(str, typev3.RateLimitStrategy_DENY_ALL, "blocked")
	default:
		b.blanketLocked(str, typev3.RateLimitStrategy_DENY_ALL, "refused")
	}
}

// rejoinLocked subscribes to a limited bucket's machine every stream the
// bucket serves that the machine does not know: a new machine (its counter
// or window moved, or it was not limited before) starts with no streams,
// and the window's lease must count them all, not only the next to report.
// Each joins as its first report does, its demand unknown.
func (b *bucket) rejoinLocked(now time.Time) {
	if b.kind != ratelimit.QuotaLimited {
		return
	}
	for id, sub := range b.subs {
		known := false
		for i := range b.state.Streams {
			if b.state.Streams[i].ID == id {
				known = true
				break
			}
		}
		if known {
			continue
		}
		acts, err := b.machine.ReportFrom(&b.state, now, id, sub.st.conn, 0, 0, 0)
		if err != nil {
			continue // past MaxStreams: its own report says so
		}
		b.doLocked(acts, now)
	}
}

// resolveLocked makes the bucket serve q: a new machine when its counter or
// window changed (the old one's units stay charged to their windows), the
// new limit on the same machine when only the figure changed.
func (b *bucket) resolveLocked(q ratelimit.Quota, now time.Time) {
	if q.Kind == ratelimit.QuotaLimited {
		limits := machineFirst(q.Limits)
		l := limits[0]
		m := rlqs.Machine{Limit: l.Limit, Window: l.Window, Guard: b.srv.opts.Guard}
		for _, o := range limits[1:] {
			m.Limit = min(m.Limit, o.Limit)
		}
		if err := m.Validate(); err != nil {
			q = ratelimit.Quota{Kind: ratelimit.QuotaRefused, Refused: fmt.Errorf("%w: rule %s/%s: %v", ratelimit.ErrQuotaRefused, l.Rule.Domain, l.Rule.Name, err)}
		} else {
			same := b.kind == ratelimit.QuotaLimited && sameCounters(b.limits, limits)
			b.limits, b.machine = limits, m
			if !same {
				b.resetLocked()
			}
			b.kind = q.Kind
			return
		}
	}
	if b.kind == ratelimit.QuotaLimited {
		b.resetLocked()
	}
	b.kind = q.Kind
	if q.Kind == ratelimit.QuotaRefused {
		if msg := q.Refused.Error(); msg != b.refused {
			b.refused = msg
			b.srv.warns.warn(b.srv.log, now, "rlqs: bucket answered DENY_ALL", b.domain, "", "err", q.Refused)
		}
	}
}

// resetLocked drops the machine's state. Units it leased and sent stay
// charged to their windows; a lease in flight lands on nothing and is
// returned (gen).
func (b *bucket) resetLocked() {
	b.stopLocked()
	b.state = rlqs.Bucket{}
	b.gen++
	clear(b.expired)
	clear(b.windows)
}

// doLocked carries out acts: give units back, send assignments, ask a
// lease, set the timer.
func (b *bucket) doLocked(acts rlqs.Actions, now time.Time) {
	if r := acts.Return; r.Credits > 0 {
		b.giveBackLocked(r.Credits, r.WindowEnd, now)
	}
	for _, a := range acts.Assign {
		s := b.subs[rlqs.StreamID(a.Stream)]
		if a.Deny {
			// No share of the window, or a share about to expire: deny
			// until it ends, rather than leave the Envoy to its
			// no-assignment behaviour.
			if s != nil {
				reason := "no_share"
				if a.Seal {
					reason = "expiring"
				}
				b.srv.stats.add(func(t *stats) { t.blanket[BlanketReason{Action: "deny_all", Reason: reason}]++ })
				s.st.push(b.key, b.action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}, a.TTL))
			}
			continue
		}
		b.srv.stats.rule(b.rule(), func(r *RuleStats) {
			r.Assignments++
			r.Units += a.MaxTokens
			if a.Fresh {
				r.TopUps++
			}
		})
		if s == nil {
			continue // left meanwhile: the machine charged it all the same
		}
		d := due{action: b.tokenBucket(a)}
		if a.Fresh {
			// Envoy drops the spent bucket at the DENY_ALL and builds the
			// top-up full (rlqs.Assignment.Fresh).
			d.deny = b.action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}, a.TTL)
		}
		s.st.pushDue(b.key, d)
	}
	if l := acts.Lease; l.ID != 0 {
		b.leaseAsync(l, now)
	}
	if !acts.Wake.IsZero() && (b.timer == nil || !acts.Wake.Equal(b.wake)) {
		// Reports in a window's steady state ask for the same instant:
		// the timer set for it stays (setting one costs a timer and a
		// closure per report). The delay is from the clock's time now,
		// not from now: a landing that waited for the lock would arm
		// its timer late by the wait.
		b.stopLocked()
		b.timer, b.wake = b.srv.clk.AfterFunc(max(acts.Wake.Sub(b.srv.clk.Now()), 0), b.tick), acts.Wake
	}
	b.countExpiriesLocked(now)
}

// leaseAsync asks the store for l, from every limit (limits.go), and lands
// the answer on the machine that asked, outside the bucket's lock.
func (b *bucket) leaseAsync(l rlqs.LeaseAsk, sent time.Time) {
	limits, gen := b.limits, b.gen
	var held int64 // what this sidecar holds of the window in place
	if sent.Before(b.state.Until) {
		held = b.state.Leased - b.state.Returned
	}
	// A bucket's first lease (its subscriptions', sized by the prior) is
	// first come: a burst of new buckets costs no ledger round trips (3,000
	// buckets subscribed at once took more than 10 s to lease beside
	// another test run).
	// A top-up is for what the window has left, first come: sized by
	// this sidecar's share, the top-ups of one window announced and
	// waited for in the ledger as a window's first lease, and left the
	// other sidecar 5 of its 30 (TestSidecarsShareAWindowByDemand).
	w := sent.UnixMicro() / max(limits[0].Window.Microseconds(), 1)
	share := w != b.shared && !b.state.Until.IsZero() && !l.TopUp
	b.srv.callStarted()
	go func() {
		defer b.srv.callDone()
		ctx, cancel := context.WithTimeout(context.Background(), b.srv.opts.StoreTimeout)
		g, parts, shared, err := b.leaseAll(ctx, limits, l, sent, held, share)
		cancel()
		b.mu.Lock()
		if shared {
			b.shared = w
		}
		now := b.srv.clk.Now()
		if b.dead || gen != b.gen || b.kind != ratelimit.QuotaLimited {
			b.mu.Unlock()
			if err == nil && g.Granted > 0 {
				for i, lim := range limits {
					b.returnUnits(lim, g.Granted, parts[i], now)
				}
			}
			return
		}
		var acts rlqs.Actions
		if err != nil {
			b.srv.warns.warn(b.srv.log, now, "rlqs: lease failed; the next window or report asks again", b.domain, limits[0].Rule.Name, "err", err)
			acts = b.machine.Failed(&b.state, l.ID, now)
		} else {
			if g.Granted > 0 {
				b.windows[g.WindowEnd] = parts
			}
			acts = b.machine.Landed(&b.state, l.ID, sent, now, g)
		}
		b.doLocked(acts, now)
		for end := range b.windows {
			if end.Before(b.state.WindowEnd) {
				delete(b.windows, end) // an older window: nothing of it is given back any more
			}
		}
		if err == nil {
			// Counted once the assignments are queued: a test waits on it.
			b.srv.stats.rule(limits[0].Rule, func(r *RuleStats) { r.Leases++ })
		}
		empty := len(b.subs) == 0
		b.mu.Unlock()
		if empty {
			b.srv.drop(b)
		}
	}()
}

// returnUnits gives units of g's window back to lim's counter, in the
// background.
func (b *bucket) returnUnits(lim ratelimit.QuotaLimit, units int64, g ratelimit.QuotaGrant, now time.Time) {
	b.srv.callStarted()
	go func() {
		defer b.srv.callDone()
		ctx, cancel := context.WithTimeout(context.Background(), b.srv.opts.StoreTimeout)
		defer cancel()
		if err := lim.Leaser.Return(ctx, lim.Key, units, g, now); err != nil {
			b.srv.warns.warn(b.srv.log, b.srv.clk.Now(), "rlqs: returning units failed: they stay counted until their window ends", b.domain, lim.Rule.Name, "units", units, "err", err)
			return
		}
		b.srv.stats.rule(lim.Rule, func(r *RuleStats) { r.Returned += units })
	}()
}

// tick is the window timer: time has passed. The bucket resolves against
// the policy again first when a reload has moved it on: the lease a new
// window starts with is the policy's in use, not the one the bucket had
// captured (with the last report before a cut from 100 to 10 a minute at
// second 55, the window at 60 was assigned 100). When the reload took its
// limit away, its streams are told at once (DENY_ALL for a cut to 0 or a
// refusal, ALLOW_ALL without a limit), as a report would be.
func (b *bucket) tick() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dead || b.kind != ratelimit.QuotaLimited {
		return
	}
	now := b.srv.clk.Now()
	b.resolveIfStaleLocked(b.id.GetBucket(), now) // tells every stream when the limit went away
	if b.kind == ratelimit.QuotaLimited {
		b.doLocked(b.machine.Tick(&b.state, now), now)
	}
}

// countExpiriesLocked counts the assignments whose life has ended at now,
// once each.
func (b *bucket) countExpiriesLocked(now time.Time) {
	for _, s := range b.state.Streams {
		if s.Window.IsZero() || s.Live.After(now) || b.expired[s.ID].Equal(s.Window) {
			continue
		}
		b.expired[s.ID] = s.Window
		b.srv.stats.rule(b.rule(), func(r *RuleStats) { r.Expiries++ })
	}
}

// leave ends str's subscription: its assignment stays charged.
func (b *bucket) leave(str *stream) {
	b.mu.Lock()
	if b.subs[str.id] == nil {
		b.mu.Unlock()
		return
	}
	b.leaveLocked(str, b.srv.clk.Now())
	empty := len(b.subs) == 0
	b.mu.Unlock()
	if empty {
		b.srv.drop(b)
	}
}

func (b *bucket) leaveLocked(str *stream, now time.Time) {
	delete(b.subs, str.id)
	delete(b.expired, str.id)
	if b.kind == ratelimit.QuotaLimited {
		b.doLocked(b.machine.Leave(&b.state, now, str.id), now)
	}
}

// abandonLocked tells str's Envoy to drop the bucket (it resubscribes on
// its next request) and ends the subscription.
func (b *bucket) abandonLocked(str *stream, now time.Time) {
	b.leaveLocked(str, now)
	delete(str.subs, b.key)
	if b.kind == ratelimit.QuotaLimited {
		b.srv.stats.rule(b.rule(), func(r *RuleStats) { r.Abandons++ })
	}
	b.srv.stats.add(func(t *stats) { t.abandons++ })
	str.push(b.key, &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId:     b.id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	})
}

func (b *bucket) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
}

func (b *bucket) stopLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
}

// tokenBucket is assignment a as Envoy reads it. max_tokens is a uint32:
// a larger share is sent as 2³²−1 (it was charged in full).
func (b *bucket) tokenBucket(a rlqs.Assignment) *rlqspb.RateLimitQuotaResponse_BucketAction {
	tb := &typev3.TokenBucket{
		MaxTokens:     uint32(min(a.MaxTokens, math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(uint32(max(min(a.TokensPerFill, math.MaxUint32), 1))),
		FillInterval:  durationpb.New(a.FillInterval),
	}
	return b.action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tb}}, a.TTL)
}

// blanketLocked sends str a blanket rule for the bucket.
func (b *bucket) blanketLocked(str *stream, rule typev3.RateLimitStrategy_BlanketRule, reason string) {
	name := "deny_all"
	if rule == typev3.RateLimitStrategy_ALLOW_ALL {
		name = "allow_all"
	}
	b.srv.stats.add(func(t *stats) { t.blanket[BlanketReason{Action: name, Reason: reason}]++ })
	str.push(b.key, b.action(&typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}, b.srv.opts.BlanketTTL))
}

func (b *bucket) action(strategy *typev3.RateLimitStrategy, ttl time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl.Truncate(time.Second)),
				RateLimitStrategy:    strategy,
			},
		},
	}
}
