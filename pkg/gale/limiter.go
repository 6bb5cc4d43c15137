package gale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// Mode is how a Limiter shares work between its local tier (L1) and the
// store (L2).
type Mode uint8

const (
	// Strict asks the store on every check: exact, one round trip each.
	// Over a Forgetful store it also remembers the denials it is given, and
	// answers from them only after the store may have forgotten the counts
	// behind them (a restarted Redis), until they lapse (forget.go).
	Strict Mode = iota
	// CachedDeny asks the store for every admission but remembers denials
	// until their RetryAfter, so a flood on a blocked key costs the store
	// nothing.
	CachedDeny
	// Leased leases credits from the store in batches and serves them
	// locally.
	Leased
)

func (m Mode) String() string {
	switch m {
	case Strict:
		return "strict"
	case CachedDeny:
		return "cached_deny"
	case Leased:
		return "leased"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ErrorPolicy says what a check answers when the store fails.
type ErrorPolicy uint8

const (
	// FailError returns the error (wrapping ErrStore): the caller decides.
	FailError ErrorPolicy = iota
	// FailOpen admits, with Decision.Fallback set.
	FailOpen
	// FailClosed denies, with Decision.Fallback set.
	FailClosed
)

func (p ErrorPolicy) String() string {
	switch p {
	case FailError:
		return "error"
	case FailOpen:
		return "allow"
	case FailClosed:
		return "deny"
	}
	return fmt.Sprintf("ErrorPolicy(%d)", uint8(p))
}

var (
	// ErrStore wraps every store failure a FailError limiter returns.
	ErrStore = errors.New("gale: store failed")
	// ErrClosed is returned by checks on a closed Limiter.
	ErrClosed = errors.New("gale: limiter closed")
)

// LeaseConfig tunes leased mode. The zero value leases a tenth of the
// capacity at a time, window-coupled, with no background refill and no idle
// return.
type LeaseConfig struct {
	// Batch is how many credits a lease asks for (at least the check's cost).
	// 0 means max(1, capacity/10).
	Batch int64
	// Uncoupled lets credits outlive the store window that granted them. The
	// default (false) expires them at that window's end, which bounds the
	// admissions of any fleet to Limit per window; uncoupled, the bound is
	// Limit + N·(Batch−1) for N nodes (Limit + N·Batch with LowWater).
	Uncoupled bool
	// LowWater, when > 0, starts a background lease once a key's credits fall
	// to it, so checks rarely wait on the store. Window-coupled, the refill
	// asks a whole batch (the credits it joins die with their window);
	// where credits carry over (Uncoupled, or a rule without windows) it
	// asks only what tops the key up to Batch, so a node never holds more
	// than Batch credits and uncoupled leasing keeps Limit + N·Batch.
	LowWater int64
	// ReturnIdleAfter, when > 0, returns a key's credits to the store once the
	// key has had no check for this long, so other nodes can use them.
	ReturnIdleAfter time.Duration
	// NewSizer, when set, gives each key its own BatchSizer, which chooses
	// the key's lease size from the demand it served in past windows (Batch
	// is then only the first lease's size). Safety does not depend on it:
	// with window coupling a fleet admits at most Limit per window whatever
	// sizes are chosen.
	NewSizer func() BatchSizer
}

// BatchSizer chooses one key's lease size from the demand the key served per
// window (pkg/gale/sizing's LeaseSizer is one). The limiter calls it under
// the key's lock: it need not be safe for concurrent use.
type BatchSizer interface {
	// Batch is the size of the next lease.
	Batch() int64
	// Observe reports the units served in one window that has ended.
	Observe(demand float64)
}

// Config configures a Limiter. Rule is required; the rest have defaults.
type Config struct {
	Rule  Rule
	Mode  Mode
	Lease LeaseConfig
	// MaxKeys bounds the keys held in L1 (cached denials and leased credits).
	// 0 means DefaultMaxKeys. A full L1 evicts its least recently used key
	// among a sample, returning its credits; a check that finds nothing to
	// evict asks the store directly.
	MaxKeys int
	// OnStoreError is what a check answers when the store fails.
	OnStoreError ErrorPolicy
	// StoreTimeout bounds every store call. 0 means DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Clock drives the idle-return sweep, and is the time at which Close
	// returns the leased credits still live. nil means the real clock.
	Clock clock.Clock
}

// Defaults for Config's zero fields.
const (
	DefaultMaxKeys      = 1 << 16
	DefaultStoreTimeout = 50 * time.Millisecond
)

// Limiter enforces one Rule for any number of keys, over a Store shared with
// the rest of the fleet. It is safe for concurrent use. Close it to stop its
// background work and return its leased credits.
type Limiter struct {
	store   Store
	rule    Rule
	mode    Mode
	lease   LeaseConfig
	onError ErrorPolicy
	timeout time.Duration
	clock   clock.Clock
	l1      *table  // nil in strict mode, unless the store is Forgetful
	m       Machine // leased mode's protocol, which checkLeased drives
	local   bool    // the store is InMemory: its calls need no deadline
	// forgets is the store, when it can tell that it forgot (and is not
	// InMemory); kept is what strict mode does about it (forget.go).
	forgets Forgetful
	kept    kept

	bg       context.Context // parent of background store calls; cancelled by Close
	cancelBg context.CancelFunc
	wg       sync.WaitGroup // background leases, returns and the sweeper
	bgWork   background     // background leases and returns in flight (Settle)
	closed   atomic.Bool
	stop     chan struct{} // closed by Close to end the sweeper

	counters counters
}

// New returns a Limiter for cfg over store.
func New(store Store, cfg Config) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("gale: nil store")
	}
	if err := cfg.Rule.Validate(); err != nil {
		return nil, err
	}
	if cfg.Mode > Leased {
		return nil, fmt.Errorf("gale: unknown mode %d", cfg.Mode)
	}
	if cfg.OnStoreError > FailClosed {
		return nil, fmt.Errorf("gale: unknown store error policy %d", cfg.OnStoreError)
	}
	lc := cfg.Lease
	if lc.Batch < 0 || lc.LowWater < 0 || lc.ReturnIdleAfter < 0 || cfg.MaxKeys < 0 || cfg.StoreTimeout < 0 {
		return nil, errors.New("gale: negative batch, low water, idle time, max keys or store timeout")
	}
	if lc.Batch == 0 {
		lc.Batch = max(1, cfg.Rule.Capacity()/10)
	}
	if lc.Batch > MaxLimit {
		return nil, fmt.Errorf("gale: lease batch %d above %d", lc.Batch, int64(MaxLimit))
	}
	if lc.LowWater >= lc.Batch && cfg.Mode == Leased && lc.LowWater > 0 {
		return nil, fmt.Errorf("gale: low water %d must be below the batch %d", lc.LowWater, lc.Batch)
	}
	l := &Limiter{
		store:   store,
		rule:    cfg.Rule,
		mode:    cfg.Mode,
		lease:   lc,
		onError: cfg.OnStoreError,
		timeout: cfg.StoreTimeout,
		clock:   cfg.Clock,
		stop:    make(chan struct{}),
	}
	if l.timeout == 0 {
		l.timeout = DefaultStoreTimeout
	}
	_, l.local = store.(InMemory)
	if f, ok := store.(Forgetful); ok && !l.local {
		l.forgets = f
	}
	l.m = Machine{Rule: cfg.Rule, Batch: lc.Batch, Uncoupled: lc.Uncoupled, LowWater: lc.LowWater, NewSizer: lc.NewSizer, ReturnIdleAfter: lc.ReturnIdleAfter}
	if l.clock == nil {
		l.clock = clock.Real{}
	}
	if l.mode != Strict || l.forgets != nil {
		maxKeys := cfg.MaxKeys
		if maxKeys == 0 {
			maxKeys = DefaultMaxKeys
		}
		l.l1 = newTable(maxKeys)
	}
	l.bg, l.cancelBg = context.WithCancel(context.Background())
	if l.mode == Leased && lc.ReturnIdleAfter > 0 {
		l.wg.Add(1)
		go l.sweep()
	}
	return l, nil
}

// Rule returns the rule the limiter enforces.
func (l *Limiter) Rule() Rule { return l.rule }

// StoreTimeout returns the bound on each of the limiter's store calls.
func (l *Limiter) StoreTimeout() time.Duration { return l.timeout }

// Mode returns the limiter's mode.
func (l *Limiter) Mode() Mode { return l.mode }

// Check asks whether cost units of key may be admitted at now. now is the
// caller's clock, stamped once per request. On a store failure the answer
// follows the OnStoreError policy; a cancelled ctx returns ctx.Err().
func (l *Limiter) Check(ctx context.Context, key string, cost int64, now time.Time) (Decision, error) {
	if cost < 1 || cost > MaxLimit {
		return Decision{}, fmt.Errorf("%w (got %d)", ErrInvalidCost, cost)
	}
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	// Stores count in whole microseconds: so does everything below, or a
	// sub-microsecond remainder would let credits outlive their window.
	// (Add keeps the monotonic reading; Truncate would drop it.)
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	switch l.mode {
	case CachedDeny:
		return l.checkCachedDeny(ctx, key, cost, now)
	case Leased:
		return l.checkLeased(ctx, key, nil, cost, false, now)
	}
	if l.forgets != nil {
		return l.checkStrict(ctx, key, cost, now)
	}
	return l.checkStore(ctx, key, cost, now)
}

// CheckBytes is Check for a key in bytes, which it does not keep: a leased
// check served from a key L1 already holds costs no allocation (Check's
// string would cost one per request). The bytes are read only during the
// call. (It repeats Check's checks rather than sharing a helper with it: the
// extra call cost the engine's hot path 12 ns.)
func (l *Limiter) CheckBytes(ctx context.Context, key []byte, cost int64, now time.Time) (Decision, error) {
	if l.mode != Leased {
		return l.Check(ctx, string(key), cost, now)
	}
	if cost < 1 || cost > MaxLimit {
		return Decision{}, fmt.Errorf("%w (got %d)", ErrInvalidCost, cost)
	}
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	now = now.Add(-time.Duration(now.Nanosecond() % 1000))
	return l.checkLeased(ctx, "", key, cost, false, now)
}

// checkStore asks the store (strict mode, and the fallback of a full L1).
func (l *Limiter) checkStore(ctx context.Context, key string, cost int64, now time.Time) (Decision, error) {
	return l.askStore(ctx, key, cost, false, now)
}

// askStore makes one store call for key at now, within the limiter's
// store timeout (none for a store in this process): Check of cost, or,
// with charge, Charge of cost units counted in full. A failure is answered
// by the limiter's OnStoreError.
func (l *Limiter) askStore(ctx context.Context, key string, cost int64, charge bool, now time.Time) (Decision, error) {
	sctx := ctx // the call's; ctx stays the caller's, for failed
	if !l.local {
		var cancel context.CancelFunc
		sctx, cancel = StoreContext(ctx, l.timeout)
		defer cancel()
	}
	var d Decision
	var err error
	if charge {
		d, err = l.store.Charge(sctx, key, l.rule, cost, now)
	} else {
		d, err = l.store.Check(sctx, key, l.rule, cost, now)
	}
	l.counters.storeChecks.Add(1)
	if err != nil {
		d, err = l.failed(ctx, err)
	}
	d.Trips = 1
	return d, err
}

func (l *Limiter) checkCachedDeny(ctx context.Context, key string, cost int64, now time.Time) (Decision, error) {
	if d, ok := l.l1.cachedDenial(key, cost, now); ok {
		d.Trips = 0 // the remembered denial came from the store; this one does not
		return d, nil
	}
	d, err := l.checkStore(ctx, key, cost, now)
	if err != nil || d.Allowed || d.Fallback || d.RetryAfter <= 0 {
		return d, err
	}
	l.l1.rememberDenial(l, key, cost, d, now)
	return d, nil
}

// failed applies the store error policy. A caller whose own context ended
// gets its context's error, whatever the policy.
func (l *Limiter) failed(ctx context.Context, err error) (Decision, error) {
	l.counters.storeErrors.Add(1)
	d, err := l.onError.Answer(ctx, l.rule.Limit, err)
	if d.Fallback {
		l.counters.fallbacks.Add(1)
	}
	return d, err
}

// Answer is what a check of a rule admitting limit answers under policy p
// when its store call failed with err: a fallback decision, or err wrapping
// ErrStore. A caller whose own ctx ended gets ctx.Err(), whatever the policy.
func (p ErrorPolicy) Answer(ctx context.Context, limit int64, err error) (Decision, error) {
	if ctx.Err() != nil {
		return Decision{}, ctx.Err()
	}
	switch p {
	case FailOpen:
		return Decision{Allowed: true, Limit: limit, Fallback: true}, nil
	case FailClosed:
		return Decision{Limit: limit, Fallback: true}, nil
	}
	return Decision{}, fmt.Errorf("%w: %w", ErrStore, err)
}

// Close stops background work, waits for leases in flight, and returns every
// unexpired leased credit to the store. Checks after Close fail with
// ErrClosed. Close is idempotent; ctx bounds the returns.
func (l *Limiter) Close(ctx context.Context) error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.stop)
	if l.l1 != nil {
		// Barrier: background work is started only under a shard lock after
		// checking closed, so once every shard has been locked here no new
		// work can join the wait group.
		for i := range l.l1.shards {
			l.l1.shards[i].mu.Lock()
			l.l1.shards[i].mu.Unlock() //nolint:staticcheck // an empty critical section is the barrier
		}
	}
	l.wg.Wait()
	l.cancelBg()
	if l.l1 == nil || l.mode != Leased {
		return nil
	}
	// One error for them all, naming the first: a store that is down fails
	// every key, and a line per key would be thousands of them.
	var first error
	var keys, credits int64
	for _, r := range l.l1.drain(l, func(*entry) bool { return true }, l.clock.Now()) {
		if err := l.store.Return(ctx, r.key, l.rule, r.Credits, r.WindowEnd, r.At); err != nil {
			if first == nil {
				first = fmt.Errorf("%d credits of %q: %w", r.Credits, r.key, err)
			}
			keys, credits = keys+1, credits+r.Credits
			continue
		}
		l.counters.creditsReturned.Add(r.Credits)
	}
	if first != nil {
		return fmt.Errorf("gale: returning leased credits of %d keys (%d credits) failed; the store counts them until their windows or leases end; first: %w", keys, credits, first)
	}
	return nil
}
