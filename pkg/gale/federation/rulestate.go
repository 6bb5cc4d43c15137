package federation

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Bounds of what a RuleState keeps.
const (
	// maxPending bounds the reconciles kept to retry.
	maxPending = 1024
	// maxRegionalKeys bounds the keys whose regional-budget units are
	// remembered (RegionalHeld): past it, what a process gives back of
	// a window whose record could not be kept is dropped, not reconciled.
	maxRegionalKeys = 1 << 16
	// maxSeenKeys bounds the keys whose coordinator Remaining is
	// remembered: past it, an escrow take reports the escrow's balance
	// alone, which under-states what is left, never over.
	maxSeenKeys = 1 << 16
	// regionalSkew is how long after its window's end (on the callers'
	// clock) a RegionalHeld is kept when room is needed: a give-back of a
	// window that ended longer ago than that is expired at the coordinator
	// whatever it is.
	regionalSkew = time.Minute
)

// RuleState is what the regions of one rule in one process carry across
// policy reloads, so that a Region replaced by a reload loses nothing: the
// reconciles waiting to be retried (and the one goroutine retrying them),
// the regional-budget units each key took in the window in place, the
// reconcile sequence and the counters. The zero value is not usable; call
// NewRuleState. It is safe for concurrent use.
type RuleState struct {
	counters *Counters
	seq      atomic.Uint64

	mu       sync.Mutex
	pending  []pendingReconcile
	retrying int // reconciles being retried now (taken out of pending)
	closed   bool
	wg       sync.WaitGroup

	// regional is each key's RegionalHeld; overflow is the latest window
	// end a record was refused for (the map full of live windows):
	// give-backs of windows up to it without a record are dropped.
	regional map[string]*RegionalHeld
	overflow time.Time

	// seen is each key's coordinator Remaining at this process's last
	// coordinator answer, and the window it is of (coordinatorLeft).
	seen map[string]seenRemaining
}

// seenRemaining is what the coordinator reported left of the window ending
// at WindowEnd (its clock), after its last grant to this process.
type seenRemaining struct {
	WindowEnd time.Time
	Remaining int64
}

type pendingReconcile struct {
	key  string
	rule gale.Rule
	rec  Reconcile
}

// NewRuleState returns an empty RuleState counting in counters (a fresh
// Counters when nil).
func NewRuleState(counters *Counters) *RuleState {
	if counters == nil {
		counters = &Counters{}
	}
	return &RuleState{counters: counters, regional: make(map[string]*RegionalHeld), seen: make(map[string]seenRemaining)}
}

// Close stops retrying, waits for a retry under way to end, and drops the
// reconciles still waiting (capacity lost, never an overshoot). Idempotent.
func (s *RuleState) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counters.reconcileLost.Add(int64(len(s.pending)))
	s.pending = nil
}

// Pending returns how many reconciles wait to be retried, or are being
// retried now.
func (s *RuleState) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) + s.retrying
}

// queue keeps p to be retried, dropping the oldest beyond maxPending.
func (s *RuleState) queue(p pendingReconcile) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == maxPending {
		s.pending = s.pending[1:]
		s.counters.reconcileLost.Add(1)
	}
	s.pending = append(s.pending, p)
}

// retry retries the reconciles that failed, in the background, through r
// (whose coordinator has just answered a lease): one retrier at a time,
// with the same tokens, so a reconcile that did land before is reported
// Duplicate. Close waits for it.
func (s *RuleState) retry(r *Region) {
	s.mu.Lock()
	if s.closed || s.retrying > 0 || len(s.pending) == 0 {
		s.mu.Unlock()
		return
	}
	s.retrying = len(s.pending)
	todo := s.pending
	s.pending = nil
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		defer cancel()
		var again []pendingReconcile
		for _, p := range todo {
			if !r.send(ctx, p) {
				again = append(again, p)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.retrying = 0
		s.pending = append(again, s.pending...)
		if over := len(s.pending) - maxPending; over > 0 {
			s.pending = s.pending[over:]
			s.counters.reconcileLost.Add(int64(over))
		}
	}()
}

// tookRegional records that key took g from the regional budget at now.
func (s *RuleState) tookRegional(m *RegionMachine, key string, g gale.Grant, now time.Time) {
	if g.Granted <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.regional[key]
	if h == nil {
		if len(s.regional) >= maxRegionalKeys {
			for k, old := range s.regional {
				if old.WindowEnd.Add(regionalSkew).Before(now) {
					delete(s.regional, k)
				}
			}
		}
		if len(s.regional) >= maxRegionalKeys {
			if g.WindowEnd.After(s.overflow) {
				s.overflow = g.WindowEnd
			}
			return
		}
		h = &RegionalHeld{}
		s.regional[key] = h
	}
	m.TookRegional(h, g)
}

// splitReturn divides credits key gives back of the window ending at
// windowEnd into regional-budget units and the rest (RegionMachine.
// SplitReturn). known is false when the rest may hold regional units whose
// record could not be kept: the caller then drops it.
func (s *RuleState) splitReturn(m *RegionMachine, key string, credits int64, windowEnd time.Time) (regional, rest int64, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.regional[key]
	if h == nil {
		return 0, credits, windowEnd.After(s.overflow)
	}
	regional, rest = m.SplitReturn(h, credits, windowEnd)
	if h.Units == 0 {
		delete(s.regional, key)
	}
	return regional, rest, true
}

// sawRemaining records that the coordinator, answering a lease of key at
// now, had remaining units left of the window ending at windowEnd.
func (s *RuleState) sawRemaining(key string, windowEnd time.Time, remaining int64, now time.Time) {
	if windowEnd.IsZero() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[key]; !ok && len(s.seen) >= maxSeenKeys {
		for k, old := range s.seen {
			if old.WindowEnd.Add(regionalSkew).Before(now) {
				delete(s.seen, k)
			}
		}
		if len(s.seen) >= maxSeenKeys {
			return
		}
	}
	s.seen[key] = seenRemaining{WindowEnd: windowEnd, Remaining: max(remaining, 0)}
}

// coordinatorLeft is what the coordinator had left of key's window ending
// at windowEnd at this process's last answer of it, 0 when none is known.
func (s *RuleState) coordinatorLeft(key string, windowEnd time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.seen[key]; ok && v.WindowEnd.Equal(windowEnd) {
		return v.Remaining
	}
	return 0
}
