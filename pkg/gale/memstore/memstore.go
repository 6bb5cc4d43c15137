// Package memstore is the in-memory gale.Store: the embedded default, for a
// single process. It applies the pure strategies of package gale under a lock
// per shard, and forgets a key once its state has expired.
package memstore

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

const (
	shardCount = 64
	// sweepEvery is the least number of operations a shard takes between
	// sweeps of its expired keys, so memory follows the live key set. A shard
	// holding more keys waits that many operations: a sweep costs O(1) per
	// operation, amortised.
	sweepEvery = 4096
)

// Store is an in-memory gale.Store. The zero value is not usable; call New.
// It is safe for concurrent use.
type Store struct {
	seed   maphash.Seed
	shards [shardCount]shard

	ledgerMu sync.Mutex
	ledgers  map[string]*ledger // by key; guarded by ledgerMu
}

var (
	_ gale.Store        = (*Store)(nil)
	_ gale.DemandLedger = (*Store)(nil)
)

// ledger is one counter's demand ledger: the window it records and each
// member's demand in it.
type ledger struct {
	window        int64
	lapse         int64            // Unix µs: the end of the window after it
	demands, prev map[string]int64 // in the window, and in the one before
}

type shard struct {
	mu   sync.Mutex
	keys map[string]*entry
	ops  int      // operations since the last sweep
	_    [40]byte // keep shards on separate cache lines
}

type entry struct {
	state    gale.State
	expireAt int64 // Unix µs; the state equals the zero State from then on
}

// New returns an empty Store.
func New() *Store {
	s := &Store{seed: maphash.MakeSeed(), ledgers: map[string]*ledger{}}
	for i := range s.shards {
		s.shards[i].keys = make(map[string]*entry)
	}
	return s
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shardCount]
}

// Check takes cost units of key, or nothing.
func (s *Store) Check(ctx context.Context, key string, rule gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	o, err := s.take(ctx, key, rule, cost, cost, now.UnixMicro())
	if err != nil {
		return gale.Decision{}, err
	}
	return o.Decision(rule), nil
}

// InMemory marks the store as answering from memory, without waiting
// (gale.InMemory).
func (s *Store) InMemory() {}

// Lease takes between min and max units of key.
func (s *Store) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	us := now.UnixMicro()
	o, err := s.take(ctx, key, rule, min, max, us)
	if err != nil {
		return gale.Grant{}, err
	}
	return o.Grant(rule, us), nil
}

func (s *Store) take(ctx context.Context, key string, rule gale.Rule, min, max, now int64) (gale.Outcome, error) {
	if err := ctx.Err(); err != nil {
		return gale.Outcome{}, err
	}
	if err := gale.CheckArgs(rule, min, max); err != nil {
		return gale.Outcome{}, err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	var st gale.State
	if e != nil && e.expireAt > now {
		st = e.state
	}
	next, o := rule.Take(st, now, min, max)
	if o.Granted > 0 {
		if e == nil {
			e = &entry{}
			sh.keys[key] = e
		}
		e.state, e.expireAt = next, o.ExpireAt
	}
	sh.tick(now)
	return o, nil
}

// Charge counts n units of key in full, even past the limit (Rule.Charge);
// n = 0 counts nothing and writes nothing.
func (s *Store) Charge(ctx context.Context, key string, rule gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	if err := ctx.Err(); err != nil {
		return gale.Decision{}, err
	}
	if err := gale.CheckCharge(rule, n); err != nil {
		return gale.Decision{}, err
	}
	us := now.UnixMicro()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	var st gale.State
	if e != nil && e.expireAt > us {
		st = e.state
	}
	next, o := rule.Charge(st, us, n)
	if n > 0 {
		if e == nil {
			e = &entry{}
			sh.keys[key] = e
		}
		e.state, e.expireAt = next, o.ExpireAt
	}
	sh.tick(us)
	return o.ChargeDecision(rule), nil
}

// Return gives unused credits back to the window that granted them.
func (s *Store) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := gale.CheckReturn(rule, credits); err != nil {
		return err
	}
	us := now.UnixMicro()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.keys[key]
	if e == nil || e.expireAt <= us {
		return nil
	}
	if next, changed := rule.Give(e.state, us, credits, gale.MicrosOf(windowEnd)); changed {
		e.state = next
	}
	return nil
}

// Len returns the number of keys held, expired ones not yet swept included.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// tick counts an operation and sweeps the shard when enough have passed.
// Called with sh locked.
func (sh *shard) tick(now int64) {
	sh.ops++
	if sh.ops < max(sweepEvery, len(sh.keys)) {
		return
	}
	sh.ops = 0
	for k, e := range sh.keys {
		if e.expireAt <= now {
			delete(sh.keys, k)
		}
	}
}

// Announce records member's demand for key in the window of rule's period
// that now falls in and returns the demands gale.DemandLedger says.
func (s *Store) Announce(ctx context.Context, key string, rule gale.Rule, member string, demand int64, now time.Time) ([]gale.Demand, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := gale.CheckAnnounce(rule, member, demand); err != nil {
		return nil, err
	}
	at, period := now.UnixMicro(), rule.Period.Microseconds()
	w := at / period
	s.ledgerMu.Lock()
	defer s.ledgerMu.Unlock()
	l := s.ledgers[key]
	switch {
	case l != nil && l.window > w:
		return []gale.Demand{{Member: member, Units: demand}}, nil
	case l == nil || l.window < w:
		if len(s.ledgers) >= sweepEvery {
			for k, o := range s.ledgers {
				if o.lapse <= at {
					delete(s.ledgers, k)
				}
			}
		}
		next := &ledger{window: w, lapse: (w + 2) * period, demands: map[string]int64{}}
		if l != nil && l.window == w-1 {
			next.prev = l.demands
		}
		l = next
		s.ledgers[key] = l
	}
	l.demands[member] = demand
	out := make([]gale.Demand, 0, len(l.demands)+len(l.prev))
	for m, d := range l.demands {
		out = append(out, gale.Demand{Member: m, Units: d})
	}
	if at-w*period < gale.LedgerEarly(rule.Period).Microseconds() {
		for m, d := range l.prev {
			if _, heard := l.demands[m]; !heard {
				out = append(out, gale.Demand{Member: m, Units: d, Past: true})
			}
		}
	}
	return out, nil
}
