package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// Defaults for the zero fields of Options.
const (
	// DefaultPrefix starts every key name.
	DefaultPrefix = "tk:"
	// DefaultMaxBatch is the most operations in one pipeline.
	DefaultMaxBatch = 128
	// DefaultPipelines is the number of pipelines in flight. Measured with
	// BenchmarkPipelines (GOMAXPROCS=2, redis-server 7.0 on the same two
	// cores, a 75–100µs PING; ns per check, median of 10 runs of 2s, and
	// round trips per check):
	//
	//	pipelines   16 callers        64 callers
	//	1           35.4µs  0.125     24.3µs  0.031
	//	2           29.0µs  0.20      19.8µs  0.049
	//	3           26.5µs  0.26      18.7µs  0.064
	//	4           28.2µs  0.33      19.4µs  0.081
	//	8           30.1µs  0.58      21.0µs  0.16
	//
	// One pipeline leaves Redis idle while the next batch is built; from 2
	// to 4 throughput is flat within the noise of the machine (±10%), as
	// the script's CPU time in Redis (about 12µs) is the bound; more
	// pipelines only split batches. 2 has the fewest round trips of those.
	DefaultPipelines = 2
	// DefaultTimeout bounds a round trip.
	DefaultTimeout = time.Second
)

// Options configure a Store. The zero value is the default for every field.
type Options struct {
	// Prefix starts the name of every Redis key the store writes; empty
	// means DefaultPrefix ("tk:").
	Prefix string
	// ServerTime makes the scripts read Redis's clock (TIME) instead of the
	// now passed to each call, so that a fleet agrees on window boundaries;
	// Grant.Now then carries Redis's time. The production setting. Default
	// false: the caller's now is used (deterministic tests).
	ServerTime bool
	// MaxBatch is the most operations one pipeline carries, at most 65536;
	// 0 means DefaultMaxBatch (128).
	MaxBatch int
	// Pipelines is the number of dispatcher goroutines, and so the most
	// pipelines in flight at once, at most 1024; 0 means DefaultPipelines.
	Pipelines int
	// Timeout bounds each round trip to Redis (its pipeline and the EVAL
	// retry after a NOSCRIPT, with the client's own retries), whatever the
	// callers' contexts allow, so that a dead server cannot wedge a
	// dispatcher; 0 means DefaultTimeout (1s). A call that queues behind a
	// round trip in flight can wait up to about twice Timeout; a caller's
	// context ends its wait sooner.
	Timeout time.Duration
	// WaitReplicas, when > 0, makes a check (strict and cached_deny modes)
	// and a charge durable across a Sentinel failover: the round trip
	// carrying it ends with WAIT WaitReplicas, and it is answered only once that many
	// replicas hold it; fewer within WaitTimeout fail it with an error
	// wrapping ErrNotReplicated (the caller's on_store_error decides).
	// Leases and returns are not waited for. It needs a client of one
	// server (plain or Sentinel-managed): New refuses it with a Cluster or
	// Ring client. Default 0: no WAIT (see wait.go for the cost).
	WaitReplicas int
	// WaitTimeout is how long Redis waits for WaitReplicas, rounded up to
	// the millisecond, at most Timeout; 0 means Timeout/2.
	WaitTimeout time.Duration
	// Watch, when set, is the restart watch installed on the client's
	// OnConnect: Forgot then reports the new servers it found, and the
	// store's strict limiters keep the denials they were given across them
	// (gale.Forgetful). nil: Forgot is always 0.
	Watch *Watch
}

// Upper bounds of Options: the queue holds Pipelines·MaxBatch requests.
const (
	maxMaxBatch  = 1 << 16
	maxPipelines = 1 << 10
)

// ErrClosed is returned by operations on a Store after Close.
var ErrClosed = errors.New("redisstore: store closed")

// ErrTimeRange is returned for a now, or a window end, outside the instants
// the scripts compute with exactly: Unix microseconds in [0, 2^53), that is
// from 1970 to June 2255 (Lua numbers are doubles).
var ErrTimeRange = errors.New("redisstore: time outside 1970..2255 (Unix µs in [0, 2^53))")

// maxMicros bounds the Unix µs a script is given: every integer below it is
// exact in a double.
const maxMicros = 1 << 53

// ErrMalformedReply is wrapped by the error returned when Redis answers a
// script with something other than what the script returns.
var ErrMalformedReply = errors.New("redisstore: malformed reply")

// Store is a gale.Store on Redis. Create it with New; the zero value is not
// usable. It is safe for concurrent use; Close stops its dispatchers.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	serverTime bool
	fuse       bool // one script call per round trip's fixed-window checks (fuse.go)
	maxBatch   int
	timeout    time.Duration
	wait       replicaWait // Options.WaitReplicas (wait.go)
	watch      *Watch      // Options.Watch; nil for none

	queue     chan *request
	closing   chan struct{} // closed by Close: dispatchers stop taking requests
	stopped   chan struct{} // closed once every dispatcher has returned
	closeOnce sync.Once
	wg        sync.WaitGroup

	ops, roundTrips, failures atomic.Uint64
}

var _ gale.Forgetful = (*Store)(nil)

// Stats are counters of a Store's traffic since New. Ops / RoundTrips is the
// batching factor.
type Stats struct {
	// Ops is the number of operations sent to Redis (an EVAL sent again
	// after a NOSCRIPT is not counted twice).
	Ops uint64
	// RoundTrips is the number of pipelines and single commands sent, the
	// EVAL retries after a NOSCRIPT included.
	RoundTrips uint64
	// Errors is the number of operations sent that failed: a Redis error,
	// a malformed reply, a connection error or a timeout.
	Errors uint64
}

// New returns a Store on client and starts its dispatchers. It does no I/O:
// the scripts are cached in Redis on first use. The client stays the
// caller's: Close does not close it.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if opts.MaxBatch < 0 || opts.MaxBatch > maxMaxBatch || opts.Pipelines < 0 || opts.Pipelines > maxPipelines || opts.Timeout < 0 {
		return nil, fmt.Errorf("redisstore: options out of range: MaxBatch %d (0..%d), Pipelines %d (0..%d), Timeout %v (≥ 0)",
			opts.MaxBatch, maxMaxBatch, opts.Pipelines, maxPipelines, opts.Timeout)
	}
	s := &Store{
		client:     client,
		prefix:     opts.Prefix,
		serverTime: opts.ServerTime,
		maxBatch:   opts.MaxBatch,
		// One server: a script may touch keys of any slot. A Cluster or
		// Ring client sends each key to its own server.
		fuse:    isSingle(client),
		timeout: opts.Timeout,
		watch:   opts.Watch,
		closing: make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.maxBatch == 0 {
		s.maxBatch = DefaultMaxBatch
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	wait, err := newReplicaWait(client, opts, s.timeout)
	if err != nil {
		return nil, err
	}
	s.wait = wait
	n := opts.Pipelines
	if n == 0 {
		n = DefaultPipelines
	}
	s.queue = make(chan *request, n*s.maxBatch)
	s.wg.Add(n)
	for i := 0; i < n; i++ {
		d := &dispatcher{s: s, pipe: client.Pipeline(), batch: make([]*request, 0, s.maxBatch)}
		go d.run()
	}
	return s, nil
}

// isSingle reports whether every key client sends goes to one server (a
// plain or Sentinel-managed client).
func isSingle(client redis.UniversalClient) bool {
	_, ok := client.(*redis.Client)
	return ok
}

// Close stops the dispatchers after the round trips in flight, which it waits
// for; operations still queued, and any made later, return ErrClosed. It
// does not close the client. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.wg.Wait()
		close(s.stopped)
	})
	return nil
}

// Stats returns the store's counters. It is safe to call at any time.
func (s *Store) Stats() Stats {
	return Stats{Ops: s.ops.Load(), RoundTrips: s.roundTrips.Load(), Errors: s.failures.Load()}
}

// Forgot is how many times the server behind the store was found to be a
// new one (Options.Watch's Restarts), each of which may have forgotten
// counts; 0 without a watch. It is one atomic load.
func (s *Store) Forgot() uint64 {
	if s.watch == nil {
		return 0
	}
	return s.watch.Restarts()
}

// Key returns the name of the Redis hash holding the state of key:
// Prefix + "{" + key + "}".
func (s *Store) Key(key string) string { return s.prefix + "{" + key + "}" }

// Check takes cost units of key under rule, or nothing. It returns ctx.Err()
// when ctx ends first (the check may still be applied), ErrClosed after
// Close, ErrTimeRange for a now the scripts cannot represent, an error
// wrapping gale.ErrInvalidRule or gale.ErrInvalidCost for bad arguments
// (nothing is sent), and otherwise an error naming the operation and key
// and wrapping the Redis or connection error.
func (s *Store) Check(ctx context.Context, key string, rule gale.Rule, cost int64, now time.Time) (gale.Decision, error) {
	o, _, err := s.take(ctx, opCheck, key, rule, cost, cost, now)
	if err != nil {
		return gale.Decision{}, err
	}
	return o.Decision(rule), nil
}

// Lease takes between min and max units of key under rule: as many as remain
// up to max, none when fewer than min remain. Grant.Now is the now passed in,
// or Redis's time under ServerTime. Errors are as for Check.
func (s *Store) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	o, at, err := s.take(ctx, opLease, key, rule, min, max, now)
	if err != nil {
		return gale.Grant{}, err
	}
	return o.Grant(rule, at), nil
}

// Return gives credits leased in the window ending at windowEnd (the Grant's
// WindowEnd, in the store's time) back to key. Credits of a window that has
// ended are dropped; credits ≤ 0 change nothing and are not sent. Errors are
// as for Check.
func (s *Store) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := gale.CheckReturn(rule, credits); err != nil {
		return err
	}
	end := gale.MicrosOf(windowEnd)
	if err := s.checkTime(now); err != nil {
		return err
	}
	if end < 0 || end >= maxMicros {
		return fmt.Errorf("%w: window end %v", ErrTimeRange, windowEnd)
	}
	if credits <= 0 {
		return nil // Rule.Give changes nothing: no need to ask
	}
	r := s.request(ctx, opReturn, key, rule, now)
	r.nums[6], r.nums[7], r.narg = credits, end, argsOther
	if err := s.do(ctx, r); err != nil {
		return err
	}
	defer putRequest(r)
	return s.failure(ctx, r)
}

// Charge counts n units of key under rule in full, even past the limit
// (gale.Rule.Charge); n = 0 counts nothing. Errors are as for Check.
func (s *Store) Charge(ctx context.Context, key string, rule gale.Rule, n int64, now time.Time) (gale.Decision, error) {
	if err := ctx.Err(); err != nil {
		return gale.Decision{}, err
	}
	if err := gale.CheckCharge(rule, n); err != nil {
		return gale.Decision{}, err
	}
	if err := s.checkTime(now); err != nil {
		return gale.Decision{}, err
	}
	r := s.request(ctx, opCharge, key, rule, now)
	r.nums[6], r.narg = n, argsCheck
	if err := s.do(ctx, r); err != nil {
		return gale.Decision{}, err
	}
	defer putRequest(r)
	if err := s.failure(ctx, r); err != nil {
		return gale.Decision{}, err
	}
	o, err := chargeOutcome(r.reply[:], r.nreply, n)
	if err != nil {
		s.failures.Add(1)
		return gale.Decision{}, fmt.Errorf("redisstore: charge %q: %w", key, err)
	}
	return o.ChargeDecision(rule), nil
}

// take runs the check or lease script; it returns the outcome and the
// script's now (Unix µs).
func (s *Store) take(ctx context.Context, o op, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Outcome, int64, error) {
	if err := ctx.Err(); err != nil {
		return gale.Outcome{}, 0, err
	}
	if err := gale.CheckArgs(rule, min, max); err != nil {
		return gale.Outcome{}, 0, err
	}
	if err := s.checkTime(now); err != nil {
		return gale.Outcome{}, 0, err
	}
	r := s.request(ctx, o, key, rule, now)
	r.nums[6], r.nums[7], r.narg = min, max, argsOther
	if o == opCheck {
		r.narg = argsCheck
		if rule.Algorithm == gale.FixedWindow {
			r.op = opCheckFixed
		}
	}
	if err := s.do(ctx, r); err != nil {
		return gale.Outcome{}, 0, err
	}
	defer putRequest(r)
	if err := s.failure(ctx, r); err != nil {
		return gale.Outcome{}, 0, err
	}
	out, at, err := outcome(r.reply[:], r.nreply, min, max)
	if err != nil {
		s.failures.Add(1)
		return gale.Outcome{}, 0, fmt.Errorf("redisstore: %v %q: %w", o, key, err)
	}
	return out, at, nil
}

// checkTime reports whether now can be passed to a script; it is ignored
// (and so not checked) under ServerTime.
func (s *Store) checkTime(now time.Time) error {
	if us := now.UnixMicro(); !s.serverTime && (us < 0 || us >= maxMicros) {
		return fmt.Errorf("%w: now %v", ErrTimeRange, now)
	}
	return nil
}

// request fills a pooled request with the arguments every script takes.
func (s *Store) request(ctx context.Context, o op, key string, rule gale.Rule, now time.Time) *request {
	r := getRequest()
	r.ctx, r.op, r.key, r.rkey = ctx, o, key, s.Key(key)
	r.nums[0] = int64(rule.Algorithm)
	r.nums[1] = rule.Limit
	r.nums[2] = int64(rule.Period / time.Microsecond)
	r.nums[3] = rule.Burst
	r.nums[4] = int64(rule.Calendar)
	if s.serverTime {
		r.args[argNow] = "" // the script reads TIME
	} else {
		r.nums[5] = now.UnixMicro()
		r.args[argNow] = &r.nums[5]
	}
	return r
}

// failure is the error r ended with, if any, saying which operation on which
// key failed; a request skipped because its caller's context ended reports
// just ctx.Err().
func (s *Store) failure(ctx context.Context, r *request) error {
	if r.err == nil {
		return nil
	}
	if err := ctx.Err(); err != nil && errors.Is(r.err, err) {
		return err
	}
	return fmt.Errorf("redisstore: %v %q: %w", r.op, r.key, r.err)
}

// outcome decodes a take script's reply {granted, remaining, resetAt,
// retryAfter, windowEnd, now} of n elements (its first ones in reply).
func outcome(reply []int64, n int, min, max int64) (gale.Outcome, int64, error) {
	if n != replyLen {
		return gale.Outcome{}, 0, fmt.Errorf("%w: %d elements, want %d", ErrMalformedReply, n, replyLen)
	}
	o := gale.Outcome{
		Granted:    reply[0],
		Remaining:  reply[1],
		ResetAt:    reply[2],
		RetryAfter: reply[3],
		WindowEnd:  reply[4],
	}
	switch {
	case o.Granted != 0 && (o.Granted < min || o.Granted > max),
		o.Remaining < 0, o.RetryAfter < 0,
		o.Granted > 0 && o.RetryAfter != 0:
		return gale.Outcome{}, 0, fmt.Errorf("%w: %v", ErrMalformedReply, reply)
	}
	return o, reply[5], nil
}

// chargeOutcome decodes a charge script's reply {counted, remaining,
// resetAt, retryAfter, windowEnd, now, over, overrun} of n elements, for a
// charge of units.
func chargeOutcome(reply []int64, n int, units int64) (gale.Outcome, error) {
	if n != chargeReplyLen {
		return gale.Outcome{}, fmt.Errorf("%w: %d elements, want %d", ErrMalformedReply, n, chargeReplyLen)
	}
	o := gale.Outcome{
		Granted:    reply[0],
		Remaining:  reply[1],
		ResetAt:    reply[2],
		RetryAfter: reply[3],
		WindowEnd:  reply[4],
		Over:       reply[6] == 1,
		Overrun:    reply[7],
	}
	switch {
	case o.Granted != units, o.Remaining < 0, o.RetryAfter < 0, reply[6] != 0 && reply[6] != 1,
		o.Overrun < 0 || o.Overrun > units, !o.Over && (o.Overrun != 0 || o.RetryAfter != 0):
		return gale.Outcome{}, fmt.Errorf("%w: %v", ErrMalformedReply, reply[:n])
	}
	return o, nil
}
