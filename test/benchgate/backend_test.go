package benchgate

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// kneeBackend is a real HTTP server with a latency knee: each request is
// served in base while at most knee are in flight (counted at its arrival),
// and in 2·base·n/knee past it: the latency doubles past the knee and grows
// with the queue beyond, so past the knee the backend completes half what it
// does at it. Its ideal goodput is knee/base requests a second, at exactly
// knee in flight.
type kneeBackend struct {
	srv        *httptest.Server
	knee       int
	base       time.Duration
	inflight   atomic.Int64
	sampling   atomic.Bool  // count what follows: set for the measured phase
	sum, count atomic.Int64 // Σ in flight over the samples, and how many
}

func newKneeBackend(t *testing.T, knee int, base time.Duration) *kneeBackend {
	b := &kneeBackend{knee: knee, base: base}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.inflight.Add(1)
		defer b.inflight.Add(-1)
		d := base
		if int(n) > knee {
			d = time.Duration(2 * float64(base) * float64(n) / float64(knee))
		}
		select { // the backend's service time, not a pause
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// ideal is the backend's best goodput, requests a second.
func (b *kneeBackend) ideal() float64 { return float64(b.knee) / b.base.Seconds() }

// sample counts what is in the backend now, in the measured phase.
func (b *kneeBackend) sample() {
	if b.sampling.Load() {
		b.sum.Add(b.inflight.Load())
		b.count.Add(1)
	}
}

// meanInflight is the mean of the samples.
func (b *kneeBackend) meanInflight() float64 {
	if n := b.count.Load(); n > 0 {
		return float64(b.sum.Load()) / float64(n)
	}
	return 0
}
