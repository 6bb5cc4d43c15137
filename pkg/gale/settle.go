package gale

import (
	"context"
	"sync"
)

// background counts the limiter's background store calls in flight (leases
// and returns), so that Settle can wait for none.
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0; nil while n is 0
}

func (b *background) start() {
	b.mu.Lock()
	if b.n == 0 {
		b.idle = make(chan struct{})
	}
	b.n++
	b.mu.Unlock()
}

func (b *background) done() {
	b.mu.Lock()
	if b.n--; b.n == 0 {
		close(b.idle)
		b.idle = nil
	}
	b.mu.Unlock()
}

// Settle waits until no background lease or return of the limiter is in
// flight, or ctx ends. A caller that drives the limiter's time itself (a
// test, a simulation) calls it to see every lease a check began land before
// it looks at the limiter's state or moves time on.
func (l *Limiter) Settle(ctx context.Context) error {
	for {
		l.bgWork.mu.Lock()
		idle := l.bgWork.idle
		l.bgWork.mu.Unlock()
		if idle == nil {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
