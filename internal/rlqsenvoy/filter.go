package rlqsenvoy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/pkg/clock"
)

// DefaultReportInterval is Envoy's send_reports_interval (hard-coded 5 s; the
// bucket's reporting_interval is not used).
const DefaultReportInterval = 5 * time.Second

// ErrConfig is returned by New for a configuration Envoy would reject or crash on.
var ErrConfig = errors.New("rlqsenvoy: bad config")

// Config is one rate_limit_quota filter configuration.
type Config struct {
	// Domain is sent on every report message.
	Domain string
	// Servers are the RLQS cluster's endpoints (host:port), at least one.
	Servers []string
	// NoAssignment is no_assignment_behavior.fallback_rate_limit; nil means
	// unset (ALLOW_ALL). A TokenBucket here is refused: Envoy caches it with
	// no token bucket and crashes on the bucket's second request.
	NoAssignment *typev3.RateLimitStrategy
	// ExpiredFallback is expired_assignment_behavior.fallback_rate_limit; nil
	// means none (reuse_last_assignment behaves as none).
	ExpiredFallback *typev3.RateLimitStrategy
	// ExpiredTimeout is expired_assignment_behavior_timeout; only whole
	// seconds are used.
	ExpiredTimeout time.Duration
	// ReportInterval is 5 s in Envoy; 0 means that. Change it only in unit tests.
	ReportInterval time.Duration
	// Replacement chooses the older (full) or newer (ratio, default) start
	// of a replaced token bucket.
	Replacement Replacement
	// Clock drives the report ticker and every decision; nil means clock.Real.
	Clock clock.Clock
	// DialOptions for the endpoints; nil means plaintext.
	DialOptions []grpc.DialOption
	// OpenTimeout bounds opening a stream on one endpoint; 0 means 1 s.
	OpenTimeout time.Duration
	// OnResponse, when set, is called with each response after it is
	// applied, at the clock's time, with the filter's lock held: it must
	// not call the filter. For tests that log what the server sent.
	OnResponse func(at time.Time, endpoint int, resp *rlqsv3.RateLimitQuotaResponse)
}

// Stats are counters of what the filter did. Messages counts every report
// message handed to a stream (immediate and periodic).
type Stats struct {
	Messages       int // report messages sent
	ImmediateSent  int // immediate (first request of a bucket) reports sent
	Dropped        int // report messages dropped (no stream, or it failed)
	StreamOpens    int // streams opened
	StreamFailures int // streams that ended (server close, reset, send error)
	Ticks          int // report ticks run
	Responses      int // responses applied
	IgnoredActions int // actions ignored (unknown bucket, RequestsPerTimeUnit, no strategy)
	Allowed        int // requests allowed
	Denied         int // requests denied
}

// Filter is one emulated Envoy rate_limit_quota filter: the decisions, the
// usage reports and one stream to one endpoint of its server cluster. Safe for
// concurrent use. Create one with New; Close it when done.
type Filter struct {
	cfg      Config
	clk      clock.Clock
	interval time.Duration
	conns    []*grpc.ClientConn

	mu        sync.Mutex
	cache     *Cache
	started   bool    // stream_tried_by_bucket_creation_
	stream    *stream // stream_; nil when closed
	next      int     // endpoint to try first on the next open
	stats     Stats
	stop      chan struct{} // closed by Close
	tickDone  chan struct{} // closed when the ticker goroutine ends
	closed    bool
	streamCtx context.Context
	cancelAll context.CancelFunc
}

type stream struct {
	s        rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel   context.CancelFunc
	endpoint int
}

// New validates cfg and returns an idle filter: no connection is attempted
// and no goroutine runs until the first request.
func New(cfg Config) (*Filter, error) {
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrConfig)
	}
	s := settings{defaultAction: strategy{kind: kindBlanket, allowAll: true}, initialAllowed: true}
	if cfg.NoAssignment != nil {
		s.defaultAction = strategyFromProto(cfg.NoAssignment)
		if s.defaultAction.kind == kindTokenBucket {
			return nil, fmt.Errorf("%w: no_assignment_behavior TokenBucket (Envoy caches it without a token bucket and crashes)", ErrConfig)
		}
		s.initialAllowed = !(s.defaultAction.kind == kindBlanket && !s.defaultAction.allowAll)
	}
	if cfg.ExpiredFallback != nil {
		fb := strategyFromProto(cfg.ExpiredFallback)
		s.fallback = &fb
	}
	s.fallbackTTL = cfg.ExpiredTimeout.Truncate(time.Second)
	if cfg.ReportInterval < 0 || cfg.OpenTimeout < 0 {
		return nil, fmt.Errorf("%w: negative interval", ErrConfig)
	}
	f := &Filter{cfg: cfg, clk: cfg.Clock, interval: cfg.ReportInterval}
	if f.clk == nil {
		f.clk = clock.Real{}
	}
	if f.interval == 0 {
		f.interval = DefaultReportInterval
	}
	if f.cfg.OpenTimeout == 0 {
		f.cfg.OpenTimeout = time.Second
	}
	opts := cfg.DialOptions
	if opts == nil {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	for _, addr := range cfg.Servers {
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			f.closeConns()
			return nil, fmt.Errorf("%w: server %q: %v", ErrConfig, addr, err)
		}
		f.conns = append(f.conns, cc)
	}
	f.cache = newCache(s, cfg.Replacement, f.clk.Now())
	f.stop = make(chan struct{})
	f.tickDone = make(chan struct{})
	f.streamCtx, f.cancelAll = context.WithCancel(context.Background())
	return f, nil
}

// Decide decides one request whose bucket id is id (a request the filter's
// matcher matched), as filter.cc recordBucketUsage does: a cached bucket is
// decided by its action, a new one by no_assignment_behavior, and a new one
// also opens the stream on the filter's first bucket and sends an immediate
// report holding just that bucket.
func (f *Filter) Decide(id map[string]string) bool {
	allowed, _ := f.DecideNew(id)
	return allowed
}

// DecideNew is Decide, also reporting whether the request created its
// bucket: it was decided by no_assignment_behavior, before any answer.
func (f *Filter) DecideNew(id map[string]string) (allowed, created bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false, false
	}
	allowed, created, initial := f.cache.decide(f.clk.Now(), id)
	if allowed {
		f.stats.Allowed++
	} else {
		f.stats.Denied++
	}
	if !created {
		return allowed, false
	}
	if !f.started { // createBucketImpl: the timer, then the stream, once
		f.started = true
		go f.tickLoop(f.clk.NewTimer(f.interval))
		f.openLocked()
	}
	if f.sendLocked([]*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{initial}) {
		f.stats.ImmediateSent++
	}
	return allowed, true
}

// Stats returns the counters so far.
func (f *Filter) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Endpoint returns the index in Config.Servers of the endpoint the open
// stream goes to, or -1 when no stream is open.
func (f *Filter) Endpoint() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stream == nil {
		return -1
	}
	return f.stream.endpoint
}

// ResetStream cancels the open stream from the client side (a test's stream
// reset); like a remote close, the next report tick reopens it.
func (f *Filter) ResetStream() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stream != nil {
		f.stream.cancel()
		f.stream = nil
		f.stats.StreamFailures++
	}
}

// Close stops the ticker, closes the stream and the connections.
func (f *Filter) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	started := f.started
	close(f.stop)
	f.cancelAll()
	f.stream = nil
	f.mu.Unlock()
	if started {
		<-f.tickDone
	}
	f.closeConns()
}

func (f *Filter) closeConns() {
	for _, cc := range f.conns {
		_ = cc.Close()
	}
}

// tickLoop is the send-reports timer: Envoy re-arms it for another interval
// after each report (startSendReportsTimerImpl), so reports are never closer
// than the interval. A ticker's fixed grid would be: a late tick then a
// punctual one covers less than the interval, and its whole-second
// time_elapsed truncates to one second less (5 s of requests reported as
// 4 s, a demand rate 25% high). The next deadline is the fired time plus the
// interval (the fake clock fires at the deadline exactly, so tests stay on
// a grid; the real one fires at or after it).
func (f *Filter) tickLoop(t clock.Timer) {
	defer close(f.tickDone)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case at := <-t.C():
			// Re-armed before the reports go out (Envoy re-arms after;
			// the deadline is the same), so that a test that has seen the
			// report may advance a fake clock past the next deadline.
			t.Reset(max(at.Add(f.interval).Sub(f.clk.Now()), 0))
			f.tick(at)
		}
	}
}

// tick is onSendReportsTimer at the timer's time at: build the reports
// (resetting the counters), reopen the stream if it is down, drop the
// reports if that fails.
func (f *Filter) tick(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.stats.Ticks++
	usages := f.cache.reports(at)
	if f.stream == nil && !f.openLocked() {
		f.stats.Dropped++
		return
	}
	f.sendLocked(usages)
}

// openLocked is startStreamImpl over a cluster: try each endpoint once,
// starting after the last one used, and keep the first stream that opens.
func (f *Filter) openLocked() bool {
	if f.stream != nil {
		return true
	}
	n := len(f.conns)
	for i := 0; i < n; i++ {
		ep := (f.next + i) % n
		ctx, cancel := context.WithCancel(f.streamCtx)
		s, err := f.openOn(ctx, ep)
		if err != nil {
			cancel()
			continue
		}
		st := &stream{s: s, cancel: cancel, endpoint: ep}
		f.stream = st
		f.next = (ep + 1) % n
		f.stats.StreamOpens++
		go f.recvLoop(st)
		return true
	}
	return false
}

// openOn opens a stream on endpoint ep. A stream opens only over a ready
// connection: grpc-go fails a non-wait-for-ready stream on an endpoint it
// cannot connect to, as Envoy's start() fails with no healthy host. The
// attempt is bounded by OpenTimeout.
func (f *Filter) openOn(ctx context.Context, ep int) (rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, error) {
	type result struct {
		s   rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := rlqsv3.NewRateLimitQuotaServiceClient(f.conns[ep]).StreamRateLimitQuotas(ctx)
		done <- result{s, err}
	}()
	timer := time.NewTimer(f.cfg.OpenTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.s, r.err
	case <-timer.C:
		return nil, fmt.Errorf("rlqsenvoy: endpoint %s: stream not open in %v", f.cfg.Servers[ep], f.cfg.OpenTimeout)
	}
}

// sendLocked is sendUsageReportImpl: a message on the open stream, or
// nothing (dropped) when there is none.
func (f *Filter) sendLocked(usages []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) bool {
	if f.stream == nil {
		f.stats.Dropped++
		return false
	}
	msg := &rlqsv3.RateLimitQuotaUsageReports{Domain: f.cfg.Domain, BucketQuotaUsages: usages}
	if err := f.stream.s.Send(msg); err != nil {
		f.stream.cancel()
		f.stream = nil
		f.stats.StreamFailures++
		f.stats.Dropped++
		return false
	}
	f.stats.Messages++
	return true
}

func (f *Filter) recvLoop(st *stream) {
	for {
		resp, err := st.s.Recv()
		f.mu.Lock()
		if err != nil {
			if f.stream == st { // onRemoteClose
				f.stream = nil
				f.stats.StreamFailures++
			}
			st.cancel()
			f.mu.Unlock()
			return
		}
		if !f.closed {
			now := f.clk.Now()
			f.stats.IgnoredActions += f.cache.apply(now, resp)
			f.stats.Responses++
			if f.cfg.OnResponse != nil {
				f.cfg.OnResponse(now, st.endpoint, resp)
			}
		}
		f.mu.Unlock()
	}
}
