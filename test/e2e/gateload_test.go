package e2e

import (
	"slices"
	"sync"
	"time"
)

// An adaptive gate infers its backend's safe concurrency from latency, and a
// loaded machine adds scheduling delay to every latency it measures that is
// not the backend's. The gate tests therefore judge a rise only when the
// latency the run itself measured leaves the gate room to rise, and say so,
// naming what they measured and the machine's load, when it did not.

// latencyLog keeps, for each request a gate admitted, when it ended and how
// long it took as its client saw it, from sending the request headers to
// the answer to the response headers. The gate's own RTT (request headers
// to response headers, in the sidecar) lies inside that span, so a
// quantile of the clients' latencies bounds the gate's from above. It is
// safe for concurrent use.
type latencyLog struct {
	mu  sync.Mutex
	at  []time.Time
	rtt []time.Duration
}

func (l *latencyLog) add(at time.Time, rtt time.Duration) {
	l.mu.Lock()
	l.at = append(l.at, at)
	l.rtt = append(l.rtt, rtt)
	l.mu.Unlock()
}

// quantileSince is the q-quantile (nearest rank) of the latencies of the
// requests that ended at or after from, and how many there were; 0 for
// none.
func (l *latencyLog) quantileSince(from time.Time, q float64) (time.Duration, int) {
	l.mu.Lock()
	var s []time.Duration
	for i, at := range l.at {
		if !at.Before(from) {
			s = append(s, l.rtt[i])
		}
	}
	l.mu.Unlock()
	if len(s) == 0 {
		return 0, 0
	}
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))], len(s)
}
