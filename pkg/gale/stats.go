package gale

import "sync/atomic"

// Stats is a snapshot of a Limiter's counters, all totals since New except
// Keys. A Prometheus collector reads it at scrape time.
type Stats struct {
	LocalHits       int64 // checks served from leased credits without waiting on the store
	CachedDenials   int64 // checks denied from a remembered denial without asking the store
	StoreChecks     int64 // strict checks sent to the store
	LeasesRequested int64
	LeasesGranted   int64
	CreditsLeased   int64
	CreditsStranded int64 // leased credits that expired unused at their window's end
	CreditsReturned int64
	StoreErrors     int64
	Fallbacks       int64 // decisions made by the OnStoreError policy
	Evictions       int64 // keys evicted from a full L1
	Keys            int64 // keys held in L1 now
	// LastBatch is the size the most recent lease asked for (the learned
	// batch, with a BatchSizer).
	LastBatch int64
}

type counters struct {
	lastBatch                                                                                           atomic.Int64
	storeChecks, leasesRequested, leasesGranted, creditsLeased, creditsReturned, storeErrors, fallbacks atomic.Int64
}

// Stats returns the limiter's counters.
func (l *Limiter) Stats() Stats {
	s := Stats{
		StoreChecks:     l.counters.storeChecks.Load(),
		LeasesRequested: l.counters.leasesRequested.Load(),
		LeasesGranted:   l.counters.leasesGranted.Load(),
		CreditsLeased:   l.counters.creditsLeased.Load(),
		CreditsReturned: l.counters.creditsReturned.Load(),
		StoreErrors:     l.counters.storeErrors.Load(),
		Fallbacks:       l.counters.fallbacks.Load(),
		LastBatch:       l.counters.lastBatch.Load(),
	}
	if l.l1 == nil {
		return s
	}
	for i := range l.l1.shards {
		sh := &l.l1.shards[i]
		sh.mu.Lock()
		s.LocalHits += sh.localHits
		s.CachedDenials += sh.cachedDenials
		s.Evictions += sh.evictions
		s.CreditsStranded += sh.stranded
		s.Keys += int64(len(sh.keys))
		sh.mu.Unlock()
	}
	return s
}
