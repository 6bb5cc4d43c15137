package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// errNotProbed is the readiness answer before the first probe.
var errNotProbed = errors.New("store not probed yet")

// storeProbe asks the store, in the background, whether it answers, and
// tells everything that reports on the store: throttlekit_store_up, /readyz
// and grpc.health.v1 all follow this one probe, so they agree with each
// other and none of them waits for someone to ask.
//
// check and ready are safe for concurrent use; record is called by one
// goroutine at a time (serve at start, then run).
type storeProbe struct {
	ping    pinger
	timeout time.Duration // bounds each probe: the store timeout
	log     *slog.Logger
	// publish is told the first answer and every change from up to down
	// or back.
	publish func(up bool)

	// last is the latest answer; nil until the first.
	last atomic.Pointer[probeAnswer]
	// busy holds a token while a ping runs, so that a hung store costs one
	// goroutine, not one per probe.
	busy chan struct{}
}

// probeAnswer is one probe's result: err is nil when the store answered.
type probeAnswer struct{ err error }

func newStoreProbe(ping pinger, timeout time.Duration, log *slog.Logger, publish func(up bool)) *storeProbe {
	return &storeProbe{ping: ping, timeout: timeout, log: log, publish: publish, busy: make(chan struct{}, 1)}
}

// check pings the store once and waits at most within for the answer. The
// wait is bounded here, not by ctx alone: go-redis ends a read at its
// ReadTimeout, not at the context's deadline. A ping still running from an
// earlier check counts as no answer.
func (p *storeProbe) check(ctx context.Context, within time.Duration) error {
	select {
	case p.busy <- struct{}{}:
	default:
		return fmt.Errorf("store did not answer within %v (the previous probe is still waiting)", within)
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	done := make(chan error, 1)
	go func() {
		defer func() { <-p.busy }()
		done <- p.ping(ctx)
	}()
	select {
	case err := <-done:
		cancel()
		return err
	case <-ctx.Done():
		// The ping goroutine ends when the client gives up; its context is
		// cancelled here, so a context-aware store returns at once.
		go func() { <-done; cancel() }()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("store did not answer within %v", within)
		}
		return ctx.Err()
	}
}

// record stores an answer and tells publish and the log when it differs from
// the last one in being up or down: an outage is logged once when it begins
// and once when it ends, not once per probe.
func (p *storeProbe) record(err error) {
	prev := p.last.Swap(&probeAnswer{err: err})
	up := err == nil
	if prev != nil && (prev.err == nil) == up {
		return
	}
	p.publish(up)
	switch {
	case !up:
		p.log.Warn("store unreachable: each rule answers by its failure mode (on_store_error) until it answers again", "err", err)
	case prev != nil:
		p.log.Info("store reachable again")
	}
}

// ready is the latest answer: nil when the store answered the last probe.
// It is /readyz's pinger, so ctx is not used: readiness never waits.
func (p *storeProbe) ready(context.Context) error {
	a := p.last.Load()
	if a == nil {
		return errNotProbed
	}
	return a.err
}

// run probes every interval until ctx ends.
func (p *storeProbe) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := p.check(ctx, p.timeout)
			if ctx.Err() != nil {
				return
			}
			p.record(err)
		}
	}
}
