package federation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
	// until the coordinator answers again. A window then admits at most
	// what the coordinator granted in it plus Σ RegionalLimit over the
	// regions in outage; with each RegionalLimit the region's static slice
	// (Partition), a window the outage covers whole admits at most the limit.
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

// maxPending bounds the reconciles a Region keeps to retry.
const maxPending = 1024

// RegionConfig configures a Region. Name and Coordinator are required.
type RegionConfig struct {
	// Name is the region's name: it starts every reconcile token.
	Name string
	// Instance names this process within the region (reconcile tokens);
	// empty means a random one.
	Instance string
	// Coordinator is the cross-region authority (L3).
	Coordinator Coordinator
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
	// budget), and the first lease after it asks Healthy first. No timer
	// runs: the probe is due on the callers' clock. 0 means
	// DefaultProbeAfter.
	ProbeAfter time.Duration
	// Timeout bounds the background retries of failed reconciles; 0 means
	// a second.
	Timeout time.Duration
	// Counters, when set, is where the region counts (shared with the
	// regions made before it for the same rule); nil for its own.
	Counters *Counters
}

// Region is a gale.Store for one rule of one region: the store a leased,
// window-coupled gale.Limiter leases through. A lease takes from the
// region's escrow first, then leases from the coordinator (the surplus of a
// coordinator lease beyond the ask refilling the escrow); units given back
// join the escrow's live balance or are reconciled to the coordinator. The
// Limiter's machine holds at most one lease in flight per key, so a process
// never races itself to the coordinator.
//
// A Region is safe for concurrent use. Stats are read with Stats.
type Region struct {
	cfg   RegionConfig
	token string // name/instance/: every reconcile token starts with it
	seq   atomic.Uint64

	// down is the caller's instant (Unix µs) until which the coordinator
	// is left alone; 0 when healthy.
	down    atomic.Int64
	lastErr atomic.Pointer[error]

	mu       sync.Mutex
	pending  []pendingReconcile
	retrying int // reconciles being retried now (taken out of pending)

	stats *Counters
}

type pendingReconcile struct {
	key  string
	rule gale.Rule
	rec  Reconcile
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
	r := &Region{cfg: cfg, token: cfg.Name + "/" + cfg.Instance + "/", stats: cfg.Counters}
	if r.stats == nil {
		r.stats = &Counters{}
	}
	if len(r.token)+20 > MaxToken {
		return nil, fmt.Errorf("federation: region and instance names too long for a reconcile token (%d bytes, at most %d)", len(r.token), MaxToken-20)
	}
	return r, nil
}

// Name returns the region's name.
func (r *Region) Name() string { return r.cfg.Name }

// Outage returns the region's outage mode.
func (r *Region) Outage() Outage { return r.cfg.Outage }

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

// Lease takes between min and max units of key for the region's process:
// from the escrow when it holds at least min, else from the coordinator.
func (r *Region) Lease(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time) (gale.Grant, error) {
	if err := CheckRule(rule); err != nil {
		return gale.Grant{}, err
	}
	if err := gale.CheckArgs(rule, lo, hi); err != nil {
		return gale.Grant{}, err
	}
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
			return heldGrant(rule, h), nil
		}
	}
	if err := r.probe(ctx, now); err != nil {
		return r.outage(ctx, key, rule, lo, hi, now, err)
	}
	ask := hi
	if r.cfg.Escrow != nil {
		ask = min(gale.MaxLimit, max(hi, r.cfg.Batch))
	}
	g, err := r.cfg.Coordinator.Lease(ctx, key, rule, lo, ask, now)
	if err != nil {
		r.fail(now, err)
		return r.outage(ctx, key, rule, lo, hi, now, err)
	}
	r.healthy()
	r.stats.leases.Add(1)
	switch {
	case g.Granted == 0:
		r.stats.denied.Add(1)
	case g.Granted < ask:
		r.stats.partial.Add(1)
	}
	r.stats.leased.Add(g.Granted)
	if g.Granted > hi {
		r.refill(ctx, key, rule, g.Granted-hi, g, now)
		g.Granted = hi
	}
	r.retryPending()
	return g, nil
}

// heldGrant is the Grant of units taken from the escrow: they live as long
// as the escrow's balance, and the coordinator's window names them.
func heldGrant(rule gale.Rule, h Held) gale.Grant {
	return gale.Grant{
		Granted:   h.Granted,
		WindowEnd: h.Window.End,
		Now:       h.Window.End.Add(-h.Window.TTL),
		Decision: gale.Decision{
			Allowed:   true,
			Limit:     rule.Limit,
			Remaining: min(h.Balance, rule.Capacity()),
			ResetAt:   h.Window.End,
			WindowEnd: h.Window.End,
		},
	}
}

// refill puts a coordinator grant's surplus into the escrow; what the
// escrow answers it will not take (a later window's balance lives there)
// goes back. A refill that fails may have landed all the same (its reply
// lost, or late past the deadline): its units are not given back, or the
// window could admit them twice, from the escrow and regranted. They are
// lost to the window instead — under-admission, never over.
func (r *Region) refill(ctx context.Context, key string, rule gale.Rule, n int64, g gale.Grant, now time.Time) {
	w := Window{End: g.WindowEnd, TTL: g.WindowEnd.Sub(g.Now)}
	added, err := r.cfg.Escrow.Refill(ctx, key, n, w, now)
	if err != nil {
		r.stats.refillUnknown.Add(n)
		return
	}
	r.stats.refilled.Add(added)
	if added < n {
		r.reconcile(ctx, key, rule, n-added, g.WindowEnd, now)
	}
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
	r.queue(key, rule, Reconcile{Leftover: n, WindowEnd: end, Token: r.token + strconv.FormatUint(r.seq.Add(1), 10), Now: now})
}

// Return gives back credits a process of the region leased in the window
// ending at windowEnd: to the escrow's live balance of that window, or to
// the coordinator.
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
	if e := r.cfg.Escrow; e != nil {
		added, err := e.Refill(ctx, key, credits, Window{End: windowEnd}, now)
		switch {
		case err != nil: // it may have landed: see refill
			r.stats.refillUnknown.Add(credits)
			return nil
		case added == credits:
			r.stats.refilled.Add(added)
			return nil
		}
	}
	r.reconcile(ctx, key, rule, credits, windowEnd, now)
	return nil
}

// reconcile gives n units of the window ending at end back to the
// coordinator under a fresh token; a failure keeps it to retry.
func (r *Region) reconcile(ctx context.Context, key string, rule gale.Rule, n int64, end, now time.Time) {
	rec := Reconcile{Leftover: n, WindowEnd: end, Token: r.token + strconv.FormatUint(r.seq.Add(1), 10), Now: now}
	if !r.send(ctx, key, rule, rec) {
		r.queue(key, rule, rec)
	}
}

// queue keeps rec to be retried, dropping the oldest beyond maxPending.
func (r *Region) queue(key string, rule gale.Rule, rec Reconcile) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == maxPending {
		r.pending = r.pending[1:]
		r.stats.reconcileLost.Add(1)
	}
	r.pending = append(r.pending, pendingReconcile{key, rule, rec})
}

// send makes one attempt at rec, and reports whether it is settled (not
// to be retried).
func (r *Region) send(ctx context.Context, key string, rule gale.Rule, rec Reconcile) bool {
	got, err := r.cfg.Coordinator.Reconcile(ctx, key, rule, rec)
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

// retryPending retries the reconciles that failed, in the background, once
// the coordinator has answered a lease: one retrier at a time, with the
// same tokens, so a reconcile that did land before is reported Duplicate.
func (r *Region) retryPending() {
	r.mu.Lock()
	if r.retrying > 0 || len(r.pending) == 0 {
		r.mu.Unlock()
		return
	}
	r.retrying = len(r.pending)
	todo := r.pending
	r.pending = nil
	r.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		defer cancel()
		var again []pendingReconcile
		for _, p := range todo {
			if !r.send(ctx, p.key, p.rule, p.rec) {
				again = append(again, p)
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.retrying = 0
		r.pending = append(again, r.pending...)
		if over := len(r.pending) - maxPending; over > 0 {
			r.pending = r.pending[over:]
			r.stats.reconcileLost.Add(int64(over))
		}
	}()
}

// Pending returns how many reconciles wait to be retried, or are being
// retried now.
func (r *Region) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending) + r.retrying
}

// probe returns nil when the coordinator may be asked at now: it is
// healthy, or its probe is due and Healthy answers.
func (r *Region) probe(ctx context.Context, now time.Time) error {
	until := r.down.Load()
	if until == 0 {
		return nil
	}
	if now.UnixMicro() < until {
		return r.downErr(until)
	}
	if err := r.cfg.Coordinator.Healthy(ctx); err != nil {
		r.fail(now, err)
		return r.downErr(r.down.Load())
	}
	return nil
}

func (r *Region) downErr(until int64) error {
	last := "unknown error"
	if p := r.lastErr.Load(); p != nil {
		last = (*p).Error()
	}
	return fmt.Errorf("%w (%s); next probe at %s", ErrCoordinatorDown, last, time.UnixMicro(until).UTC().Format(time.RFC3339Nano))
}

// fail marks the coordinator unreachable from now for ProbeAfter.
func (r *Region) fail(now time.Time, err error) {
	r.lastErr.Store(&err)
	r.stats.leaseErrors.Add(1)
	if r.down.Swap(now.Add(r.cfg.ProbeAfter).UnixMicro()) == 0 {
		r.stats.outages.Add(1)
	}
}

// healthy marks the coordinator reachable.
func (r *Region) healthy() { r.down.Store(0) }

// outage answers a lease the coordinator could not: RegionalOnly from the
// regional budget, FailClosed with err.
func (r *Region) outage(ctx context.Context, key string, rule gale.Rule, lo, hi int64, now time.Time, err error) (gale.Grant, error) {
	if r.cfg.Outage != RegionalOnly {
		return gale.Grant{}, err
	}
	sub := rule
	sub.Limit = min(rule.Limit, r.cfg.RegionalLimit)
	if sub.Limit < lo {
		return gale.Grant{Now: now, Decision: gale.Decision{Limit: rule.Limit, RetryAfter: r.cfg.ProbeAfter}}, nil
	}
	g, ferr := r.cfg.Fallback.Lease(ctx, fallbackKey(key), sub, lo, min(hi, sub.Limit), now)
	if ferr != nil {
		return gale.Grant{}, fmt.Errorf("federation: regional budget: %w (coordinator: %v)", ferr, err)
	}
	r.stats.regional.Add(g.Granted)
	g.Decision.Limit = rule.Limit
	return g, nil
}

// fallbackKey names the regional budget's key: apart from every key the
// region's store holds for itself (a NUL cannot start a descriptor key).
func fallbackKey(key string) string { return "\x00federation-regional\x00" + key }

// Down reports whether the coordinator is marked unreachable.
func (r *Region) Down() bool { return r.down.Load() != 0 }
