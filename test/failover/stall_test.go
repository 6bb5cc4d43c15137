package failover

import (
	"math"
	"runtime/metrics"
	"sort"
	"sync"
	"time"
)

// stallProbe measures how long the test process could not run: a
// goroutine asks for a wake-up every stallTick, and each that comes late
// records the span between when it was due and when it came. On a quiet
// machine the spans are a millisecond or two; on two cores shared with
// other race-enabled suites a goroutine waits hundreds of milliseconds to
// run, and an answer's timer (the store timeout) fires just as late. The
// answers are judged on the time they took less the stalls the probe saw
// while they ran, so a loaded machine's scheduling does not fail them, and
// an answer that waits far beyond its store timeout while the process
// could run still does.
//
// A goroutine woken by a timer runs before those already waiting (the
// scheduler's runnext), so the probe's stalls understate the wait of a
// goroutine woken by the network behind the callers busy on other rules:
// the runtime's own histogram of how long goroutines waited to run
// (/sched/latencies:seconds) over the run gives that (queued).
type stallProbe struct {
	stop  chan struct{}
	done  chan struct{}
	sched *metrics.Float64Histogram // at the start; at halt, the run's

	mu     sync.Mutex
	stalls []span // in order of their ends
}

// span is a stretch of wall time.
type span struct{ from, to time.Time }

// stallTick is the probe's period; stallSlack is the lateness of a wake-up
// the probe does not record (a timer's ordinary jitter).
const (
	stallTick  = 5 * time.Millisecond
	stallSlack = time.Millisecond
)

func startStallProbe() *stallProbe {
	p := &stallProbe{stop: make(chan struct{}), done: make(chan struct{}), sched: schedLatencies()}
	go func() {
		defer close(p.done)
		t := time.NewTimer(stallTick)
		defer t.Stop()
		due := time.Now().Add(stallTick)
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				// When this goroutine ran, not when the timer fired (the
				// channel's value): the wait to run is the stall.
				got := time.Now()
				if got.Sub(due) > stallSlack {
					p.mu.Lock()
					p.stalls = append(p.stalls, span{due, got})
					p.mu.Unlock()
				}
				due = got.Add(stallTick)
				t.Reset(stallTick)
			}
		}
	}()
	return p
}

// halt stops the probe; it is idempotent.
func (p *stallProbe) halt() {
	select {
	case <-p.stop:
		return
	default:
		close(p.stop)
	}
	<-p.done
	end := schedLatencies()
	for i := range end.Counts {
		end.Counts[i] -= p.sched.Counts[i]
	}
	p.sched = end
}

const schedMetric = "/sched/latencies:seconds"

func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// queued returns the q quantile of how long goroutines waited to run
// between the probe's start and its halt (an upper bound: the bucket's).
func (p *stallProbe) queued(q float64) time.Duration {
	h := p.sched
	var total uint64
	for _, c := range h.Counts {
		total += c
	}
	want := uint64(q * float64(total))
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen > want {
			up := h.Buckets[i+1]
			if math.IsInf(up, 1) {
				up = h.Buckets[i]
			}
			return time.Duration(up * float64(time.Second))
		}
	}
	return 0
}

// within returns how much of [from, to] the probe saw the process stalled.
func (p *stallProbe) within(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	// The stalls are in order of their ends, and do not overlap.
	first := sort.Search(len(p.stalls), func(i int) bool { return !p.stalls[i].to.Before(from) })
	for _, s := range p.stalls[first:] {
		if s.from.After(to) {
			break
		}
		a, b := s.from, s.to
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		d += b.Sub(a)
	}
	return d
}

// worst returns the longest stall the probe saw.
func (p *stallProbe) worst() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var w time.Duration
	for _, s := range p.stalls {
		w = max(w, s.to.Sub(s.from))
	}
	return w
}
