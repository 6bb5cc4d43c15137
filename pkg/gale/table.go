package gale

import (
	"hash/maphash"
	"sync"
	"time"
)

// table is the local tier (L1): one entry per key, in shards each guarded by
// its own mutex, holding at most maxKeys entries in all.
type table struct {
	seed     maphash.Seed
	mask     uint64
	perShard int // Invariant: len(shard.keys) <= perShard, so the table holds ≤ maxKeys.
	shards   []tshard
}

type tshard struct {
	mu   sync.Mutex
	keys map[string]*entry
	// Counters, guarded by mu so the hot path pays no atomic traffic.
	localHits, cachedDenials, evictions, stranded int64
	_                                             [64]byte
}

// entry is all L1 state of one key.
type entry struct {
	key string
	// credits are leased units not yet served. Invariant: credits >= 0.
	credits int64
	// expires is the local instant the credits die (window coupling); the
	// zero time when they never do. Invariant: expires is zero or equals
	// until.
	expires time.Time
	// windowEnd is the store window (store clock) the newest credits came
	// from, and fromWindow how many credits came from it: what may be
	// returned there. until is that window's end on the local clock (zero
	// for the strategies without windows).
	windowEnd  time.Time
	fromWindow int64
	until      time.Time
	// used is how many units this node served from windowEnd's credits
	// while that window was in place, less what refunds and negative hits
	// gave back: the most a give-back may restore. Invariant: used >= 0,
	// and used = 0 once until has passed.
	used int64
	// remote and reset are the store's Remaining and ResetAt (converted to
	// the local clock) at the last lease, for the decisions served locally.
	remote int64
	reset  time.Time
	// lease is the lease in flight for this key, nil when none. Invariant: at
	// most one per key, and an entry with a lease in flight is never evicted.
	lease *leaseCall
	// A denial remembered until denyUntil: any check needing at least
	// denyNeed units from the store is denied locally with deny.
	denyUntil time.Time
	denyNeed  int64
	deny      Decision
	lastUsed  time.Time
	// With a BatchSizer: the key's sizer, the window (by its start, in the
	// caller's clock) whose demand served is counting, and that demand.
	sizer  BatchSizer
	window int64
	served int64
}

// returned is credits to give back to the store.
type returned struct {
	key       string
	credits   int64
	windowEnd time.Time
	now       time.Time
}

// evictSample is how many entries a full shard looks at to pick the least
// recently used one to evict.
const evictSample = 8

func newTable(maxKeys int) *table {
	// Fewer shards for small tables, so the bound stays close to maxKeys.
	n := 32
	for n > 1 && maxKeys/n < 64 {
		n /= 2
	}
	t := &table{seed: maphash.MakeSeed(), mask: uint64(n - 1), perShard: max(1, maxKeys/n), shards: make([]tshard, n)}
	for i := range t.shards {
		t.shards[i].keys = make(map[string]*entry)
	}
	return t
}

func (t *table) shard(key string) *tshard {
	return &t.shards[maphash.String(t.seed, key)&t.mask]
}

// expire ends what belongs to a store window that has ended: the count of
// units served from it, and, window-coupled, its credits. Called with the
// shard locked.
func (sh *tshard) expire(e *entry, now time.Time) {
	if e.until.IsZero() || now.Before(e.until) {
		return
	}
	e.used = 0
	if e.credits > 0 && !e.expires.IsZero() {
		sh.stranded += e.credits
		e.credits, e.fromWindow = 0, 0
	}
}

// denied reports a remembered denial covering a need of need store units.
func (e *entry) denied(need int64, now time.Time) (Decision, bool) {
	if need < e.denyNeed || !now.Before(e.denyUntil) {
		return Decision{}, false
	}
	d := e.deny
	d.RetryAfter = e.denyUntil.Sub(now)
	return d, true
}

// getOrCreate returns key's entry, creating it when absent; nil when the shard
// is full and nothing can be evicted. Called with sh locked; evicted credits
// are handed to l for return.
func (t *table) getOrCreate(l *Limiter, sh *tshard, key string, now time.Time) *entry {
	if e := sh.keys[key]; e != nil {
		return e
	}
	if len(sh.keys) >= t.perShard {
		var victim *entry
		seen := 0
		for _, e := range sh.keys {
			if e.lease == nil && (victim == nil || e.lastUsed.Before(victim.lastUsed)) {
				victim = e
			}
			if seen++; seen >= evictSample {
				break
			}
		}
		if victim == nil {
			return nil
		}
		delete(sh.keys, victim.key)
		sh.evictions++
		if r, ok := returnable(sh, victim, now); ok {
			l.returnLater(r)
		}
	}
	e := &entry{key: key, lastUsed: now}
	sh.keys[key] = e
	return e
}

// returnable takes the credits of an entry leaving L1. Called with sh locked.
func returnable(sh *tshard, e *entry, now time.Time) (returned, bool) {
	sh.expire(e, now)
	n := min(e.credits, e.fromWindow)
	e.credits, e.fromWindow, e.used = 0, 0, 0
	if n <= 0 {
		return returned{}, false
	}
	return returned{key: e.key, credits: n, windowEnd: e.windowEnd, now: now}, true
}

// cachedDenial answers a check from a remembered denial (cached-deny mode).
func (t *table) cachedDenial(key string, cost int64, now time.Time) (Decision, bool) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil {
		return Decision{}, false
	}
	d, ok := e.denied(cost, now)
	if ok {
		sh.cachedDenials++
		e.lastUsed = now
	}
	return d, ok
}

// rememberDenial caches the store's denial of cost for key (cached-deny mode).
func (t *table) rememberDenial(l *Limiter, key string, cost int64, d Decision, now time.Time) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := t.getOrCreate(l, sh, key, now); e != nil {
		e.denyUntil, e.denyNeed, e.deny, e.lastUsed = now.Add(d.RetryAfter), cost, d, now
	}
}

// drain removes the entries keep selects (those without a lease in flight)
// and returns their unexpired credits. Each is returned at the later of now
// and its last check: checks carry the callers' clock, which is the one the
// store's windows are on, and it may run ahead of the limiter's own.
func (t *table) drain(l *Limiter, keep func(*entry) bool, now time.Time) []returned {
	var out []returned
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, e := range sh.keys {
			if e.lease != nil || !keep(e) {
				continue
			}
			delete(sh.keys, k)
			at := now
			if e.lastUsed.After(at) {
				at = e.lastUsed
			}
			if r, ok := returnable(sh, e, at); ok {
				out = append(out, r)
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// len returns the number of keys held.
func (t *table) len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}
