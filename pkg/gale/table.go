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

// entry is one key's place in L1: its leasing state, which the limiter's
// Machine moves, and the lease in flight for it (the driver's side of
// KeyState.Lease).
type entry struct {
	key  string
	st   KeyState
	call *leaseCall // nil when no lease is in flight
	// forgot is the store's Forgot count when a strict limiter remembered
	// the key's denial (forget.go).
	forgot uint64
}

// returned is credits to give back to the store.
type returned struct {
	key string
	Return
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

// shardBytes is shard for a key in bytes (maphash hashes both alike).
func (t *table) shardBytes(key []byte) *tshard {
	return &t.shards[maphash.Bytes(t.seed, key)&t.mask]
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
			if e.st.Lease == 0 && (victim == nil || e.st.LastUsed.Before(victim.st.LastUsed)) {
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
		if r, ok := l.returnable(sh, victim, now); ok {
			l.returnLater(r)
		}
	}
	e := &entry{key: key, st: KeyState{LastUsed: now}}
	sh.keys[key] = e
	return e
}

// returnable takes the credits of an entry leaving L1. Called with sh locked.
func (l *Limiter) returnable(sh *tshard, e *entry, now time.Time) (returned, bool) {
	r, stranded := l.m.Drain(&e.st, now)
	sh.stranded += stranded
	return returned{key: e.key, Return: r}, r.Credits > 0
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
	d, ok := e.st.CachedDenial(now, cost)
	if ok {
		sh.cachedDenials++
	}
	return d, ok
}

// rememberDenial caches the store's denial of cost for key (cached-deny mode).
func (t *table) rememberDenial(l *Limiter, key string, cost int64, d Decision, now time.Time) {
	sh := t.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := t.getOrCreate(l, sh, key, now); e != nil {
		e.st.RememberDenial(now, cost, d)
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
			if e.st.Lease != 0 || !keep(e) {
				continue
			}
			delete(sh.keys, k)
			at := now
			if e.st.LastUsed.After(at) {
				at = e.st.LastUsed
			}
			if r, ok := l.returnable(sh, e, at); ok {
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
