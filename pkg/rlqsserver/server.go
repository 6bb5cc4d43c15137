// Package rlqsserver is Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService) over the
// engine's policy: a bucket's entries are a descriptor's, its counter is
// the one RLS counts the descriptor in, and a serving sidecar leases units
// of it from the store each window and assigns them to the Envoys
// connected to it as token buckets that expire before the window ends
// (pkg/rlqs, the assignment machine, decides how much and to whom).
//
// The server speaks to the engine only through pkg/ratelimit
// (QuotaResolver, QuotaLeaser). Each bucket key (domain and bucket id) has
// one driver that serialises the machine's events — reports, stream ends,
// window timers, store answers — and carries out what the machine returns:
// store leases and returns (each bounded by Options.StoreTimeout), and
// assignments pushed on the Envoys' streams whenever they are due.
//
// Buckets without a limit get a blanket ALLOW_ALL (RLS answers OK for
// them); a limit of 0 gets a blanket DENY_ALL; a limit RLQS cannot serve
// (no window, a window under 2 s, a fair or federated rule) gets a
// blanket DENY_ALL too, and is logged naming the rule: the
// filter's own no-assignment behaviour would be DENY_ALL in a bounded
// configuration anyway, while an AbandonAction would make Envoy drop the
// bucket and resubscribe it on its next request, in a loop.
package rlqsserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/ratelimit"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// Defaults of Options.
const (
	// DefaultStoreTimeout bounds a lease or a give-back. They are on no
	// request's path: a lease abandoned after 50 ms under CPU load, or
	// across a 3 s Redis pause, still ran in Redis, and its units were
	// lost to its window (0 of 400 admitted, issue 41).
	DefaultStoreTimeout = 5 * time.Second
	// DefaultBlanketTTL is how long a blanket action lives at the Envoy;
	// it is sent again on each of the bucket's reports (every 5 s).
	DefaultBlanketTTL = 30 * time.Second
	// DefaultAbandonIdle: a subscription that has reported no request for
	// this long is abandoned.
	DefaultAbandonIdle = 10 * time.Minute
	// MaxBucketsPerStream bounds the buckets one stream subscribes; usages
	// of more are skipped (reason "streams").
	MaxBucketsPerStream = 10000
	// DefaultMaxStreamsPerConn is Options.MaxStreamsPerConn's zero value:
	// an Envoy opens one stream per domain on a connection.
	DefaultMaxStreamsPerConn = 16
	// DefaultMaxBuckets is Options.MaxBuckets's zero value.
	DefaultMaxBuckets = 100000
	// MaxActionsPerMessage is the most bucket actions one response
	// message carries: a stream's due actions go out in as few messages
	// as this allows.
	MaxActionsPerMessage = 1000
)

// Options configure a Server. Resolver is required.
type Options struct {
	// Resolver maps buckets to the policy's limits (the engine).
	Resolver ratelimit.QuotaResolver
	// Clock drives window timers and stamps events (nil: the real clock).
	Clock clock.Clock
	// Guard is how long before its window's end an assignment expires, to
	// cover one-way delivery (0: rlqs.DefaultGuard, 250 ms).
	Guard time.Duration
	// StoreTimeout bounds each lease and give-back (0:
	// DefaultStoreTimeout). The store's own round-trip bound (a Redis
	// store's Timeout, its client's read timeout) must allow as long.
	StoreTimeout time.Duration
	// BlanketTTL is a blanket action's time to live (0: DefaultBlanketTTL;
	// at least a second).
	BlanketTTL time.Duration
	// AbandonIdle abandons a subscription that reported no request for
	// this long (0: DefaultAbandonIdle; negative: never).
	AbandonIdle time.Duration
	// MaxStreamsPerConn bounds the streams open at once on one client
	// connection (0: DefaultMaxStreamsPerConn; negative: no bound): one
	// client opening 500 streams was 500 Envoys to the split. A stream
	// past it is refused with ResourceExhausted.
	MaxStreamsPerConn int
	// MaxBuckets bounds the buckets the server tracks (0:
	// DefaultMaxBuckets; negative: no bound); a usage of a new bucket past
	// it is skipped (reason "buckets").
	MaxBuckets int
	// Member is this sidecar's name in the store's demand ledger, where
	// the sidecars leasing one counter meet to share its window by their
	// Envoys' demand (empty: a random name, one per Server). Two sidecars
	// must not share one.
	Member string
	// Logger receives refusals and skipped usages (nil: discard).
	Logger *slog.Logger
}

// Server is the RateLimitQuotaService. It is safe for concurrent use.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	opts  Options
	clk   clock.Clock
	log   *slog.Logger
	warns warnings // rate-limits log's warnings per cause
	stats *stats

	nextStream atomic.Uint64
	mu         sync.Mutex
	buckets    map[string]*bucket // by bucketKey; guarded by mu
	perConn    map[string]*conn   // client connections with streams open, by peer address; guarded by mu
	nextConn   uint64             // guarded by mu
	closed     bool               // guarded by mu
	calls      sync.WaitGroup     // store calls in flight
	stopping   chan struct{}      // closed by Shutdown
	stopOnce   sync.Once
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Resolver == nil {
		return nil, errors.New("rlqsserver: nil resolver")
	}
	if opts.Guard < 0 || opts.StoreTimeout < 0 || opts.BlanketTTL < 0 {
		return nil, errors.New("rlqsserver: negative guard, store timeout or blanket TTL")
	}
	if opts.Guard == 0 {
		opts.Guard = rlqs.DefaultGuard
	}
	if opts.StoreTimeout == 0 {
		opts.StoreTimeout = DefaultStoreTimeout
	}
	if opts.BlanketTTL == 0 {
		opts.BlanketTTL = DefaultBlanketTTL
	}
	if opts.BlanketTTL < time.Second {
		return nil, errors.New("rlqsserver: blanket TTL under a second (Envoy reads whole seconds)")
	}
	if opts.AbandonIdle == 0 {
		opts.AbandonIdle = DefaultAbandonIdle
	}
	if opts.MaxStreamsPerConn == 0 {
		opts.MaxStreamsPerConn = DefaultMaxStreamsPerConn
	}
	if opts.MaxBuckets == 0 {
		opts.MaxBuckets = DefaultMaxBuckets
	}
	if opts.Member == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("rlqsserver: naming this sidecar in the demand ledger: %w", err)
		}
		opts.Member = "rlqs-" + hex.EncodeToString(b[:])
	} else if len(opts.Member) > gale.MaxMember {
		return nil, fmt.Errorf("rlqsserver: member name %q longer than %d bytes", opts.Member, gale.MaxMember)
	}
	s := &Server{opts: opts, clk: opts.Clock, log: opts.Logger, stats: newStats(), buckets: map[string]*bucket{},
		perConn: map[string]*conn{}, stopping: make(chan struct{})}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// callStarted and callDone bracket a store call made in the background.
func (s *Server) callStarted() {
	s.calls.Add(1)
	s.stats.add(func(t *stats) { t.calls++ })
}

func (s *Server) callDone() {
	s.stats.add(func(t *stats) { t.calls-- })
	s.calls.Done()
}

// Stats returns a snapshot of the server's counters (a collector reads it).
func (s *Server) Stats() Stats { return s.stats.snapshot() }

// ErrShuttingDown ends the streams open when Shutdown is called: Envoy
// opens its stream again at its next report, to a sidecar that serves.
var ErrShuttingDown = status.Error(codes.Unavailable, "rlqs: sidecar shutting down; reconnect")

// Shutdown ends every open stream with ErrShuttingDown (each bucket it
// subscribed is left: its assignment stays charged until its TTL, which
// ends before its window does) and refuses new ones, so a gRPC server's
// GracefulStop need not wait for Envoys' long-lived streams.
func (s *Server) Shutdown() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// Close stops every bucket's timer and waits, within ctx, for the store
// calls in flight. Streams still open are not ended (the gRPC server's
// GracefulStop does that); units they hold stay charged to their windows.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	buckets := make([]*bucket, 0, len(s.buckets))
	for _, b := range s.buckets {
		buckets = append(buckets, b)
	}
	s.mu.Unlock()
	for _, b := range buckets {
		b.stop()
	}
	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StreamRateLimitQuotas serves one Envoy's stream: each report's buckets
// are handed to their drivers (the first report of a bucket subscribes
// it), and assignments come back on the stream whenever they are due. A
// message that cannot be served ends the stream with InvalidArgument; a
// bucket usage that cannot be is skipped and logged. When the stream ends
// each bucket it subscribed is left: its assignment stays charged.
func (s *Server) StreamRateLimitQuotas(st grpc.BidiStreamingServer[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]) error {
	select {
	case <-s.stopping:
		return ErrShuttingDown
	default:
	}
	connID, err := s.openOnConn(st.Context())
	if err != nil {
		return err
	}
	defer s.closeOnConn(st.Context())
	str := newStream(rlqs.StreamID(s.nextStream.Add(1)), connID, s.stats)
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	s.stats.add(func(t *stats) { t.streams++ })
	defer s.stats.add(func(t *stats) { t.streams-- })
	sendErr := make(chan error, 1)
	go func() { sendErr <- str.sendLoop(ctx, st) }()
	defer func() {
		for _, b := range str.subs {
			b.leave(str)
		}
	}()
	recvErr := make(chan error, 1)
	msgs := make(chan *rlqspb.RateLimitQuotaUsageReports)
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case err := <-sendErr:
			return err
		case <-s.stopping:
			return ErrShuttingDown
		case m := <-msgs:
			if err := s.handle(str, m); err != nil {
				return err
			}
		}
	}
}

// ErrTooManyStreams refuses a stream past Options.MaxStreamsPerConn.
var ErrTooManyStreams = status.Error(codes.ResourceExhausted, "rlqs: too many streams on one connection (an Envoy opens one per domain; --rlqs-max-streams-per-conn)")

// connOf names ctx's client connection: its peer address.
func connOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.Network() + "/" + p.Addr.String()
	}
	return ""
}

// conn is one client connection: the streams it has open, and the group
// its streams' demand is split as (rlqs.Machine.ReportFrom). A connection
// whose last stream closed keeps its group for connGrace: a stream reset
// on a connection that stays is the same Envoy, and takes its old
// stream's record over (rlqs.Bucket.Left).
type conn struct {
	streams int
	id      uint64
	idle    time.Time // when its last stream closed
}

// connGrace is how long a client connection without streams keeps its
// group: longer than an Envoy's report interval (5 s), after which it
// reopens a failed stream, and than any assignment's life.
const connGrace = 2 * time.Minute

// openOnConn counts a stream opening on ctx's connection and returns the
// connection's group, or refuses the stream past MaxStreamsPerConn
// (counted).
func (s *Server) openOnConn(ctx context.Context) (uint64, error) {
	c := connOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	cn := s.perConn[c]
	if cn == nil {
		s.nextConn++
		cn = &conn{id: s.nextConn}
		s.perConn[c] = cn
	}
	if max := s.opts.MaxStreamsPerConn; max > 0 && cn.streams >= max {
		s.stats.add(func(t *stats) { t.refusedStreams++ })
		return 0, ErrTooManyStreams
	}
	cn.streams++
	return cn.id, nil
}

func (s *Server) closeOnConn(ctx context.Context) {
	c := connOf(ctx)
	now := s.clk.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cn := s.perConn[c]; cn != nil {
		if cn.streams--; cn.streams <= 0 {
			cn.streams, cn.idle = 0, now
		}
	}
	for addr, cn := range s.perConn {
		if cn.streams == 0 && now.Sub(cn.idle) > connGrace {
			delete(s.perConn, addr)
		}
	}
}

// handle serves one report message of str.
func (s *Server) handle(str *stream, m *rlqspb.RateLimitQuotaUsageReports) error {
	domain, usages, skips, err := str.dec.decode(m)
	if err == nil && str.domain != "" && domain != str.domain {
		err = errors.New("rlqs: a stream reports one domain (Envoy opens one stream per domain)")
	}
	if err != nil {
		s.stats.add(func(t *stats) { t.badReports++ })
		return status.Error(codes.InvalidArgument, err.Error())
	}
	str.domain = domain
	for _, sk := range skips {
		s.skip(domain, sk)
	}
	now := s.clk.Now()
	for i := range usages {
		u := &usages[i]
		b := str.subs[string(u.key)] // no allocation: the compiler indexes with the bytes
		if b == nil && len(str.subs) >= MaxBucketsPerStream {
			s.skip(domain, skipped{reason: "streams", err: errors.New("the stream subscribes too many buckets")})
			continue
		}
		for {
			if b == nil {
				var full bool
				if b, full = s.bucketFor(domain, u); full {
					s.skip(domain, skipped{reason: "buckets", err: fmt.Errorf("the server tracks %d buckets, its most (--rlqs-max-buckets)", s.opts.MaxBuckets)})
					break
				}
				if b == nil {
					return status.Error(codes.Unavailable, "rlqs: server shutting down")
				}
			}
			if b.report(str, u, now) {
				break
			}
			b = nil // removed meanwhile: take the new one
		}
	}
	return nil
}

func (s *Server) skip(domain string, sk skipped) {
	n := int64(max(sk.n, 1))
	s.stats.add(func(t *stats) { t.skipped[sk.reason] += n })
	s.log.Debug("rlqs: bucket usage skipped", "domain", domain, "reason", sk.reason, "err", sk.err)
}

// bucketFor is u's bucket driver, made if new; nil once closed, or with
// full when the server tracks MaxBuckets already.
func (s *Server) bucketFor(domain string, u *usage) (b *bucket, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	b = s.buckets[string(u.key)]
	if b == nil && s.opts.MaxBuckets > 0 && len(s.buckets) >= s.opts.MaxBuckets {
		return nil, true
	}
	if b == nil {
		key := string(u.key) // the decoder's buffer is reused: the bucket keeps a copy
		b = newBucket(s, domain, key, u.id)
		s.buckets[key] = b
	}
	return b, false
}

// drop removes b once it serves no stream.
func (s *Server) drop(b *bucket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) == 0 && !b.dead && b.state.Lease == 0 {
		b.dead = true
		b.stopLocked()
		if s.buckets[b.key] == b {
			delete(s.buckets, b.key)
		}
	}
}

// stream is one Envoy stream: its subscriptions and the actions due on it.
//
// Actions are not queued one message each: each bucket has at most one
// action due (a newer one for the bucket replaces one not yet sent, which
// Envoy would have replaced on arrival), and the send loop sends every
// due action in messages of up to MaxActionsPerMessage. Nothing is
// dropped: what is due is bounded by the buckets the stream subscribes.
// (A queue of 256 single-action messages dropped 743 of 1,000 abandons
// sent in a burst, and assignments charged and never delivered.)
type stream struct {
	id     rlqs.StreamID
	conn   uint64             // its client connection's group
	domain string             // set by the first report; touched by the receiving goroutine only
	subs   map[string]*bucket // by bucket key; touched by the receiving goroutine only
	dec    decoder            // touched by the receiving goroutine only
	stats  *stats
	due    chan struct{} // signalled when an action becomes due

	mu      sync.Mutex // guards what follows
	done    bool
	pending map[string]due // by bucket key
	order   []string       // pending's keys, oldest first
}

// due is what one bucket has due on a stream: an action, behind a blanket
// DENY_ALL in the same message when the action is a fresh top-up
// (rlqs.Assignment.Fresh).
type due struct {
	deny, action *rlqspb.RateLimitQuotaResponse_BucketAction
}

func (d due) len() int {
	if d.deny != nil {
		return 2
	}
	return 1
}

// newStream is stream id of client connection conn, with nothing due.
func newStream(id rlqs.StreamID, conn uint64, st *stats) *stream {
	return &stream{id: id, conn: conn, due: make(chan struct{}, 1),
		pending: map[string]due{}, subs: map[string]*bucket{}, stats: st}
}

// push makes a due on the stream for bucket key without waiting; an action
// of the bucket not yet sent is replaced (counted as superseded: an
// assignment among them stays charged, which only under-admits).
func (st *stream) push(key string, a *rlqspb.RateLimitQuotaResponse_BucketAction) {
	st.pushDue(key, due{action: a})
}

func (st *stream) pushDue(key string, d due) {
	st.mu.Lock()
	if st.done {
		st.mu.Unlock()
		return
	}
	if _, ok := st.pending[key]; ok {
		st.stats.add(func(t *stats) { t.superseded++ })
	} else {
		st.order = append(st.order, key)
	}
	st.pending[key] = d
	st.mu.Unlock()
	select {
	case st.due <- struct{}{}:
	default: // a signal is already waiting
	}
}

// next takes up to MaxActionsPerMessage due actions, oldest first, as one
// message (a top-up and the DENY_ALL ahead of it never apart); nil when
// none is due.
func (st *stream) next() *rlqspb.RateLimitQuotaResponse {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.order) == 0 {
		return nil
	}
	r := &rlqspb.RateLimitQuotaResponse{BucketAction: make([]*rlqspb.RateLimitQuotaResponse_BucketAction, 0, min(len(st.order), MaxActionsPerMessage))}
	n := 0
	for _, key := range st.order {
		d := st.pending[key]
		if len(r.BucketAction)+d.len() > MaxActionsPerMessage {
			break
		}
		if d.deny != nil {
			r.BucketAction = append(r.BucketAction, d.deny)
		}
		r.BucketAction = append(r.BucketAction, d.action)
		delete(st.pending, key)
		n++
	}
	st.order = append(st.order[:0], st.order[n:]...)
	return r
}

func (st *stream) sendLoop(ctx context.Context, s grpc.ServerStream) error {
	defer func() {
		st.mu.Lock()
		st.done = true
		clear(st.pending)
		st.order = nil
		st.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.due:
			for r := st.next(); r != nil; r = st.next() {
				if err := s.SendMsg(r); err != nil {
					return err
				}
				st.stats.add(func(t *stats) { t.messages++; t.actions += int64(len(r.BucketAction)) })
			}
		}
	}
}
