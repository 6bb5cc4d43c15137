package federation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Outage is what a region does while its coordinator is unreachable.
type Outage uint8

const (
	// FailClosed serves the escrow the region already holds (its processes'
	// credits and its shared balance), then denies until the coordinator
	// answers again. The bound holds: nothing is admitted that the
	// coordinator did not grant.
	FailClosed Outage = iota
	// RegionalOnly serves the region's escrow, then a regional budget of
	// RegionalLimit units per window, counted on the region's own store,
	// until the coordinator answers again. The budget is paced: one unit
	// at a time, at most RegionalLimit in any span of one window's length
	// (a GCRA of RegionalLimit per period with a burst of one), so that it
	// holds in every coordinator window whatever the offset between the
	// region's clock and the coordinator's (issue 40: counted in the
	// region store's own fixed windows, a window 400 ms out of phase with
	// the coordinator's admitted 9 with RegionalLimit 5). A window then
	// admits at most what the coordinator granted in it plus Σ
	// RegionalLimit over the regions in outage; with each RegionalLimit the
	// region's static slice (Partition), a window the outage covers whole
	// admits at most the limit. A call costing more than one unit is
	// denied while the budget answers, and units given back to it are lost
	// to it (a give-back out of order would let two units through one
	// slot).
	RegionalOnly
)

func (o Outage) String() string {
	switch o {
	case FailClosed:
		return "fail_closed"
	case RegionalOnly:
		return "regional_only"
	}
	return fmt.Sprintf("Outage(%d)", uint8(o))
}

// ErrCoordinatorDown is wrapped by the error a Region returns, without
// asking the coordinator, while it waits to probe it again.
var ErrCoordinatorDown = errors.New("federation: coordinator unreachable")

// DefaultProbeAfter is RegionConfig.ProbeAfter's default.
const DefaultProbeAfter = time.Second

// RegionConfig configures a Region. Name and Coordinator are required.
type RegionConfig struct {
	// Name is the region's name: it starts every reconcile token.
	Name string
	// Instance names this process within the region (reconcile tokens);
	// empty means a random one.
	Instance string
	// Coordinator is the cross-region authority (L3).
	Coordinator Coordinator
	// Health is the coordinator connection's health, shared by every
	// Region on Coordinator: an outage is the connection's, not a rule's,
	// and one probe heals every rule. nil gives the Region its own.
	Health *Health
	// Escrow is the region's shared balance (L2); nil for none (one process
	// per region, or each process on its own).
	Escrow Escrow
	// Batch, with an Escrow, is the least a lease from the coordinator asks:
	// what the asking process's lease does not take refills the escrow for
	// the region's other processes. 0 asks only what the process asks.
	Batch int64
	// Outage is what the region does while the coordinator is unreachable.
	Outage Outage
	// Fallback and RegionalLimit are RegionalOnly's regional budget: the
	// store that counts it (the region's own, shared by its processes) and
	// its units per window (at most the rule's limit). Both are required
	// with RegionalOnly, which needs a region-wide store: without one each
	// process would count its own budget.
	Fallback      gale.Store
	RegionalLimit int64
	// ProbeAfter is how long after a failed lease the coordinator is left
	// alone: leases in that time fail at once (or go to the regional
	// budget), and the first lease after it asks Healthy first (one lease
	// probes; the others answer by the outage mode until it is done). No
	// timer runs: the probe is due on the callers' clock. 0 means
	// DefaultProbeAfter. Ignored with a shared Health (it has its own).
	ProbeAfter time.Duration
	// Timeout bounds the background retries of failed reconciles; 0 means
	// a second.
	Timeout time.Duration
	// State, when set, is what the rule's regions carry across reloads
	// (reconciles to retry, regional units to give back, counters), shared
	// with the regions made before it for the same rule; nil for its own.
	State *RuleState
	// Fault makes the region's machine a deliberately broken one (tests
	// only: each is a hole the region once had).
	Fault RegionFault
}

// Region is a gale.Store for one rule of one region: the store a leased,
// window-coupled gale.Limiter leases through, and the driver of the pure
// RegionMachine. A lease takes from the region's escrow first, then leases
// from the coordinator (the surplus of a coordinator lease beyond the ask
// refilling the escrow, alive until the coordinator's window ends on the
// escrow's clock); units given back go to the regional budget they came
// from, join the escrow's live balance, or are reconciled to the
// coordinator. The Limiter's machine holds at most one lease in flight per
// key, so a process never races itself to the coordinator.
//
// A Region is safe for concurrent use. Stats are read with Stats. Close it
// (or its RuleState) to stop its background reconciles.
type Region struct {
	cfg    RegionConfig
	mach   RegionMachine
	token  string // name/instance/: every reconcile token starts with it
	health *Health
	state  *RuleState
	stats  *Counters
}

var _ gale.Store = (*Region)(nil)

// NewRegion returns a Region for cfg.
func NewRegion(cfg RegionConfig) (*Region, error) {
	switch {
	case cfg.Name == "":
		return nil, errors.New("federation: a region needs a name")
	case cfg.Coordinator == nil:
		return nil, errors.New("federation: a region needs a coordinator")
	case cfg.Batch < 0 || cfg.Batch > gale.MaxLimit:
		return nil, fmt.Errorf("federation: batch %d outside 0..%d", cfg.Batch, int64(gale.MaxLimit))
	case cfg.Outage > RegionalOnly:
		return nil, fmt.Errorf("federation: unknown outage mode %d", cfg.Outage)
	case cfg.Outage == RegionalOnly && (cfg.Escrow == nil || cfg.Fallback == nil):
		return nil, errors.New("federation: outage regional_only needs the region's own store (an L2 shared by its processes) to count the regional budget in; without one each process would count its own")
	case cfg.Outage == RegionalOnly && cfg.RegionalLimit < 1:
		return nil, errors.New("federation: outage regional_only needs regional_limit ≥ 1: the units per window the region admits on its own while the coordinator is unreachable")
	case cfg.ProbeAfter < 0 || cfg.Timeout < 0:
		return nil, errors.New("federation: negative probe interval or timeout")
	}
	if cfg.ProbeAfter == 0 {
		cfg.ProbeAfter = DefaultProbeAfter
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Instance == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		cfg.Instance = hex.EncodeToString(b[:])
	}
	r := &Region{
		cfg:    cfg,
		mach:   RegionMachine{Batch: cfg.Batch, Escrow: cfg.Escrow != nil, Fault: cfg.Fault},
		token:  cfg.Name + "/" + cfg.Instance + "/",
		health: cfg.Health,
		state:  cfg.State,
	}
	if r.health == nil {
		r.health = NewHealth(cfg.ProbeAfter)
	}
	if r.state == nil {
		r.state = NewRuleState(nil)
	}
	r.stats = r.state.counters
	if len(r.token)+20 > MaxToken {
		return nil, fmt.Errorf("federation: region and instance names too long for a reconcile token (%d bytes, at most %d)", len(r.token), MaxToken-20)
	}
	return r, nil
}

// Name returns the region's name.
func (r *Region) Name() string { return r.cfg.Name }

// Outage returns the region's outage mode.
func (r *Region) Outage() Outage { return r.cfg.Outage }

// Close stops the region's background reconciles and waits for them: the
// RuleState's Close, when the region has its own. A region sharing a
// RuleState leaves it to its owner.
func (r *Region) Close() {
	if r.cfg.State == nil {
		r.state.Close()
	}
}

// Check takes cost units of key, or nothing: a lease of exactly cost.
// Federated limiters lease; Check is here for gale.Store's sake.
func (r *Region) Check(ctx context.Context, key string, rule gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	g, err := r.Lease(ctx, key, rule, cost, cost, now)
	if err != nil {
		return gale.Decision{}, err
	}
	d := g.Decision
	if g.Granted > 0 {
		d.WindowEnd = g.WindowEnd
	}
	return d, nil
}

// Charge counts n units of key for the region's process (gale.Store's
// charge; the federated limiter's charges come here once its credits run
// out). A region cannot count past what the coordinator grants — the
// federation's bound is that count — so a charge leases as many of its n
// units as remain, from the escrow then the coordinator, and drops the
// rest: it is then denied with Overrun the units dropped, and the window,
// spent, grants nothing more until it ends. n = 0 leases one unit and
// gives it straight back: allowed while one remains, so a budget spent
// exactly denies it (a region cannot tell that from an overrun one, as
// envoyproxy/ratelimit's count does). A coordinator failure is the
// lease's: the outage mode answers, and what was leased before it stays
// counted.
func (r *Region) Charge(ctx context.Context, key string, rule gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	if err := CheckRule(rule); err != nil {
		return gale.Decision{}, err
	}
	if err := gale.CheckCharge(rule, n); err != nil {
		return gale.Decision{}, err
	}
	if n == 0 {
		g, err := r.Lease(ctx, key, rule, 1, 1, now)
		if err != nil {
			return gale.Decision{}, err
		}
		d := g.Decision
		d.WindowEnd = time.Time{}
		if g.Granted > 0 {
			// A failed give-back loses the unit to the window: under-admission.
			_ = r.Return(ctx, key, rule, g.Granted, g.WindowEnd, now)
			d.Allowed, d.RetryAfter = true, 0
			d.Remaining = min(d.Remaining+g.Granted, rule.Capacity())
		}
		return d, nil
	}
	rest := n
	var last gale.Grant
	var end time.Time
	// At most the escrow, then the coordinator, then a denial: a bound,
	// not a retry.
	for i := 0; i < 4 && rest > 0; i++ {
		g, err := r.Lease(ctx, key, rule, 1, rest, now)
		if err != nil {
			return gale.Decision{}, err
		}
		last = g
		if g.Granted == 0 {
			break
		}
		rest -= g.Granted
		end = g.WindowEnd
	}
	d := last.Decision
	d.Allowed, d.WindowEnd = rest == 0, end
	if rest > 0 {
		d.Remaining, d.Overrun = 0, rest
		if d.RetryAfter <= 0 && !end.IsZero() {
			// Partial grants to the bound: the window is as good as spent.
			d.RetryAfter = max(end.Sub(last.Now), time.Microsecond)
		}
	}
	return d, nil
}

// Lease takes between min and max units of key for the region's process:
// from the escrow when it holds at least min, else from the coordinator.
// A coordinator error that is not a refusal of this request (ErrRefused)
// marks the coordinator down for every rule on it, and the lease is
// answered by the outage mode; a refusal fails this lease only.
func (r *Region) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	if err := CheckRule(rule); err != nil {
		return gale.Grant{}, err
	}
	if err := gale.CheckArgs(rule, lo, hi); err != nil {
		return gale.Grant{}, err
	}
	took := now
	var held Held // the escrow's balance when it could not serve the lease
	if e := r.cfg.Escrow; e != nil {
		h, err := e.Take(ctx, key, lo, hi, now)
		if err != nil {
			return gale.Grant{}, fmt.Errorf("federation: regional escrow: %w", err)
		}
		if !h.Dead.IsZero() {
			r.release(ctx, key, rule, h.Dead, now)
		}
		r.stats.balance.Store(h.Balance)
		if h.Granted > 0 {
			r.stats.escrowTaken.Add(h.Granted)
			return heldGrant(rule, h, r.state.coordinatorLeft(key, h.Window.End)), nil
		}
		took, held = h.Now, h
	}
	if err := r.health.admit(ctx, r.cfg.Coordinator, now); err != nil {
		return r.outage(ctx, key, rule, lo, hi, now, err)
	}
	ask := r.mach.Ask(lo, hi)
	g, err := r.cfg.Coordinator.Lease(ctx, key, rule, lo, ask, now)
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return gale.Grant{}, err
		}
		if r.health.failed(now, err) {
			r.stats.outages.Add(1)
		}
		r.stats.leaseErrors.Add(1)
		return r.outage(ctx, key, rule, lo, hi, now, err)
	}
	r.health.answered()
	r.stats.leases.Add(1)
	switch {
	case g.Granted == 0:
		r.stats.denied.Add(1)
	case g.Granted < ask:
		r.stats.partial.Add(1)
	}
	r.stats.leased.Add(g.Granted)
	g, surplus, w := r.mach.Split(g, hi, took)
	var parked int64
	switch {
	case surplus > 0 && w.End.IsZero(): // a window already over: see refill
		r.later(key, rule, surplus, g.WindowEnd, now)
	case surplus > 0:
		parked = r.refill(ctx, key, rule, surplus, w, now)
	}
	if g.Granted > 0 {
		// What the fleet has left, as far as this answer tells: the
		// coordinator's count and the escrow's balance of the window (the
		// lease's surplus joined it). Escrow takes report the same sum
		// (heldGrant), so the process's figure does not fall to the
		// escrow's balance between two coordinator leases (issue 32).
		r.state.sawRemaining(key, g.WindowEnd, g.Decision.Remaining, now)
		if held.Window.End.Equal(g.WindowEnd) {
			parked += held.Balance
		}
		g.Decision.Remaining = min(g.Decision.Remaining+parked, rule.Capacity())
	}
	r.state.retry(r)
	return g, nil
}

// heldGrant is the Grant of units taken from the escrow: they live as long
// as the escrow's balance, and the coordinator's window names them. Its
// Remaining is the escrow's balance after the take and coordLeft, what the
// coordinator had left of that window at this process's last answer of it.
func heldGrant(rule gale.Rule, h Held, coordLeft int64) gale.Grant {
	return gale.Grant{
		Granted:   h.Granted,
		WindowEnd: h.Window.End,
		Now:       h.Window.End.Add(-h.Window.TTL),
		Decision: gale.Decision{
			Allowed:   true,
			Limit:     rule.Limit,
			Remaining: min(h.Balance+coordLeft, rule.Capacity()),
			ResetAt:   h.Window.End,
			WindowEnd: h.Window.End,
		},
	}
}

// refill puts a coordinator grant's surplus into the escrow; what the
// escrow answers it will not take (a later window's balance lives there,
// or the window is over on its clock) goes back. A refill that fails may
// have landed all the same (its reply lost, or late past the deadline):
// its units are not given back, or the window could admit them twice,
// from the escrow and regranted. They are lost to the window instead —
// under-admission, never over. It returns the units parked.
func (r *Region) refill(ctx context.Context, key string, rule gale.Rule, n int64, w Window, now time.Time) int64 {
	added, err := r.cfg.Escrow.Refill(ctx, key, n, w, now)
	if err != nil {
		r.stats.refillUnknown.Add(n)
		return 0
	}
	r.stats.refilled.Add(added)
	if added < n {
		// Queued, not sent on this lease's path: units a refill could not
		// park are mostly of a window over on the escrow's clock (a late
		// reply), and the give-back would cost the lease a round trip.
		r.later(key, rule, n-added, w.End, now)
	}
	return added
}

// release captures a dead escrow balance, once, and queues its reconcile:
// it is sent with the pending ones after the next answered lease, in the
// background, not on this lease's path, whose deadline a slow coordinator
// would spend on a give-back to a window that is over on the escrow's clock.
func (r *Region) release(ctx context.Context, key string, rule gale.Rule, end time.Time, now time.Time) {
	n, err := r.cfg.Escrow.Release(ctx, key, end, now)
	if err != nil || n <= 0 {
		return
	}
	r.stats.released.Add(n)
	r.later(key, rule, n, end, now)
}

// Return gives back credits a process of the region leased in the window
// ending at windowEnd: those it took from the regional budget to that
// budget, the rest to the escrow's live balance of that window, or to the
// coordinator.
func (r *Region) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	if err := CheckRule(rule); err != nil {
		return err
	}
	if err := gale.CheckReturn(rule, credits); err != nil {
		return err
	}
	if credits <= 0 || windowEnd.IsZero() {
		return nil
	}
	// Regional units are not given back: the paced budget has no window
	// to give them to (a give-back moving its schedule back would let two
	// units through one slot). They are lost to it: under-admission. They
	// never go to the coordinator, which did not grant them.
	_, rest, known := r.state.splitReturn(&r.mach, key, credits, windowEnd)
	if rest <= 0 || !known {
		return nil // unknown: they may be regional units (see RuleState)
	}
	if e := r.cfg.Escrow; e != nil {
		added, err := e.Refill(ctx, key, rest, Window{End: windowEnd}, now)
		switch {
		case err != nil: // it may have landed: see refill
			r.stats.refillUnknown.Add(rest)
			return nil
		case added == rest:
			r.stats.refilled.Add(added)
			return nil
		}
	}
	r.reconcile(ctx, key, rule, rest, windowEnd, now)
	return nil
}

// newReconcile is a give-back of n units of the window ending at end under
// a fresh token.
func (r *Region) newReconcile(n int64, end, now time.Time) Reconcile {
	return Reconcile{Leftover: n, WindowEnd: end, Token: r.token + strconv.FormatUint(r.state.seq.Add(1), 10), Now: now}
}

// later queues the give-back of n units of the window ending at end under
// a fresh token, to be sent in the background after the next answered
// lease: off the lease's path.
func (r *Region) later(key string, rule gale.Rule, n int64, end, now time.Time) {
	r.state.queue(pendingReconcile{key, rule, r.newReconcile(n, end, now)})
}

// reconcile gives n units of the window ending at end back to the
// coordinator under a fresh token; a failure keeps it to retry.
func (r *Region) reconcile(ctx context.Context, key string, rule gale.Rule, n int64, end, now time.Time) {
	p := pendingReconcile{key, rule, r.newReconcile(n, end, now)}
	if !r.send(ctx, p) {
		r.state.queue(p)
	}
}

// send makes one attempt at p, and reports whether it is settled (not to
// be retried).
func (r *Region) send(ctx context.Context, p pendingReconcile) bool {
	got, err := r.cfg.Coordinator.Reconcile(ctx, p.key, p.rule, p.rec)
	if err != nil {
		r.stats.reconcileFailed.Add(1)
		return false
	}
	switch got {
	case Applied:
		r.stats.reconcileApplied.Add(1)
	case Duplicate:
		r.stats.reconcileDuplicate.Add(1)
	case Expired:
		r.stats.reconcileExpired.Add(1)
	}
	return true
}

// Pending returns how many reconciles wait to be retried, or are being
// retried now.
func (r *Region) Pending() int { return r.state.Pending() }

// outage answers a lease the coordinator could not: RegionalOnly from the
// regional budget, FailClosed with err.
func (r *Region) outage(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time, err error) (gale.Grant, error) {
	if r.cfg.Outage != RegionalOnly {
		return gale.Grant{}, err
	}
	sub := r.regionalRule(rule)
	if lo > sub.Capacity() {
		// More than one unit at once: the paced budget never has it.
		return gale.Grant{Now: now, Decision: gale.Decision{Limit: rule.Limit, RetryAfter: r.health.probeAfter}}, nil
	}
	g, ferr := r.cfg.Fallback.Lease(ctx, fallbackKey(key), sub, lo, min(hi, sub.Capacity()), now)
	if ferr != nil {
		return gale.Grant{}, fmt.Errorf("federation: regional budget: %w (coordinator: %v)", ferr, err)
	}
	if g.Granted > 0 && g.WindowEnd.IsZero() {
		// A GCRA grant names no window: its unit lives until the budget's
		// next slot (its reset), which is the window a give-back names.
		g.WindowEnd = g.Decision.ResetAt
		if !g.WindowEnd.After(g.Now) {
			g.WindowEnd = g.Now.Add(sub.Period / time.Duration(sub.Limit))
		}
	}
	r.state.tookRegional(&r.mach, key, g, now)
	r.stats.regional.Add(g.Granted)
	g.Decision.Limit = rule.Limit
	return g, nil
}

// regionalRule is rule as the regional budget counts it: RegionalLimit
// (at most the rule's limit) per period, paced, with a burst of one unit.
// A GCRA of n per period with a burst of one admits at most n in any span
// of one period, so the bound needs no agreement between the region's
// clock and the coordinator's, only that they run at one rate (as the
// escrow's clock rule does).
func (r *Region) regionalRule(rule gale.Rule) gale.Rule {
	return gale.Rule{Algorithm: gale.GCRA, Limit: min(rule.Limit, r.cfg.RegionalLimit), Period: rule.Period, Burst: 1}
}

// fallbackKey names the regional budget's key: apart from every key the
// region's store holds for itself (a NUL cannot start a descriptor key).
func fallbackKey(key string) string { return "\x00federation-regional\x00" + key }

// Down reports whether the coordinator is marked unreachable.
func (r *Region) Down() bool { return r.health.Down() }
