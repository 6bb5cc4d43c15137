package boundcheck

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/rlqs"
)

// How an RLQS run settles. A sidecar and its Envoys work in goroutines of
// their own (store calls, timer callbacks, each stream's receiving and
// sending loops), so before the driver moves the clock on it waits for
// what the last step or timer started to end. What it cannot see from
// outside — that a report was handled, that what a handling pushed was
// sent — it learns from barriers: a report it injects into each stream
// behind the Envoy's, whose answer comes after everything the stream's
// earlier reports made the sidecar push. What would still slip past (a
// store call or a message made after the clock moved) fails the run as
// the checker's error, never as a broken bound.

// A barrier is a usage of a bucket no limit matches (rlqsBarrierKey),
// which the sidecar answers with ALLOW_ALL on the stream's one send loop,
// in order; the driver swallows the answer, and the Envoy sees neither.
const (
	rlqsBarrierKey = "bcsync"
	rlqsStreamKey  = "bc-stream" // metadata naming a stream to both ends
)

// rlqsStream is one stream as both of its ends saw it; guarded by run.mu.
type rlqsStream struct {
	id                     uint64
	envoy                  *rlqsEnvoy
	sidecar                *rlqsSidecar
	clientSent, clientRecv int
	serverRecv, serverSent int
	barriers, acks         int
	// up and down are the instants of the messages in flight each way,
	// oldest first: each must cross at the instant it was sent.
	up, down      []time.Time
	clientEnded   bool
	serverStarted bool
	serverEnded   bool
	inject        chan *rlqspb.RateLimitQuotaUsageReports
}

// settle waits until what the last step or timer started has ended: timer
// callbacks and Envoys' ticks run, store calls landed, every report sent
// handled (a barrier behind it on each stream answered), and every
// response sent applied by its Envoy. A round of barriers is repeated
// while the sidecars' counters moved during it (a lease that a report
// started may land after the stream's barrier).
func (r *rlqsRun) settle() error {
	for {
		if err := r.await("quiet", r.quiet); err != nil {
			return err
		}
		sig := r.signature()
		r.barrier()
		if err := r.await("barriers", func() bool { return r.acked() && r.quiet() }); err != nil {
			return err
		}
		if r.signature() == sig {
			break
		}
	}
	r.mu.Lock()
	r.dirty = false
	r.mu.Unlock()
	return r.await("delivery", r.delivered)
}

// await waits for cond, woken by the run's changes and polling what does
// not tell (store calls, Envoys' ticks), for testenv.StoreDeadline at most.
func (r *rlqsRun) await(what string, cond func() bool) error {
	deadline := time.Now().Add(testenv.StoreDeadline)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for n := 0; ; n++ {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond() {
			return nil
		}
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rlqs run: %s: not settled within %v", what, testenv.StoreDeadline)
		}
		if n < 20 {
			runtime.Gosched()
			continue
		}
		poll := min(time.Duration(n-19)*20*time.Microsecond, time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(poll)
		} else {
			timer.Reset(poll)
		}
		select {
		case <-ch:
		case <-timer.C:
		}
	}
}

// quiet: no timer callback runs, every Envoy has handled its ticks, no
// sidecar has a store call in flight, every stream's two ends agree it is
// open (each report sent received) or ended (and its Envoy has let it go),
// and none of that moved while it was looked at: the checks are not one
// atomic read, and a tick that sent its report between the streams' check
// and the ticks' would let a barrier overtake the report.
func (r *rlqsRun) quiet() bool {
	r.mu.Lock()
	before := r.events
	r.mu.Unlock()
	if !r.clk.idle() {
		return false
	}
	for _, e := range r.envoys {
		if e.f.Stats().Ticks != r.clk.firedFor(e.owner) {
			return false
		}
	}
	for _, s := range r.allSidecars() {
		if s.srv.Stats().StoreCalls != 0 {
			return false
		}
	}
	var gone []*rlqsEnvoy // Envoys whose newest stream has ended
	r.mu.Lock()
	for _, s := range r.streams {
		switch {
		case !s.clientEnded && !s.serverEnded:
			if s.serverRecv != s.clientSent || len(s.up) != 0 {
				r.mu.Unlock()
				return false
			}
		case s.clientEnded && s.serverStarted && !s.serverEnded, s.serverEnded && !s.clientEnded:
			r.mu.Unlock()
			return false
		}
	}
	for _, e := range r.envoys {
		if e.latest != nil && e.latest.clientEnded {
			gone = append(gone, e)
		}
	}
	r.mu.Unlock()
	for _, e := range gone {
		if e.f.Endpoint() != -1 {
			return false
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events == before && r.clk.idle()
}

// signature sums what the sidecars have done that pushes a response or
// follows a store call: leases answered, assignments, blanket actions
// (less the barriers' answers), abandons.
func (r *rlqsRun) signature() int64 {
	var n int64
	for _, s := range r.allSidecars() {
		st := s.srv.Stats()
		for _, rs := range st.Rules {
			n += rs.Leases + rs.Assignments
		}
		for _, v := range st.Blanket {
			n += v
		}
		n += st.Abandons
		r.mu.Lock()
		n -= s.acks
		r.mu.Unlock()
	}
	return n
}

// barrier injects a barrier report into every open stream.
func (r *rlqsRun) barrier() {
	msg := &rlqspb.RateLimitQuotaUsageReports{Domain: r.domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqspb.BucketId{Bucket: map[string]string{rlqsBarrierKey: "1"}}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(0),
	}}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.streams {
		if s.serverStarted && !s.serverEnded && !s.clientEnded {
			s.barriers++
			s.inject <- msg
		}
	}
}

func (r *rlqsRun) acked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.streams {
		if !s.serverEnded && !s.clientEnded && s.acks != s.barriers {
			return false
		}
	}
	return true
}

// delivered: every response sent on a stream its Envoy still reads has
// been received and applied by the Envoy. A message is in flight from the
// moment its send starts (s.down), not from when the send returns, and on
// a stream the sidecar has ended until the Envoy reads the end: counting
// only finished sends on open streams let the clock move under a response
// still crossing (the checker's "response sent at 30.501 s crossed at
// 30.704 s", seed 34486 of a 100,000-seed run).
func (r *rlqsRun) delivered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	recv := make([]int, len(r.envoys))
	for _, s := range r.streams {
		recv[s.envoy.index] += s.clientRecv
		if !s.clientEnded && (len(s.down) != 0 || !s.serverEnded && s.clientRecv != s.serverSent) {
			return false
		}
	}
	for i, e := range r.envoys {
		if e.applied != recv[i] {
			return false
		}
	}
	return true
}

// clientInterceptor names each stream Envoy e opens (metadata the
// sidecar's end reads) and counts what crosses it.
func (r *rlqsRun) clientInterceptor(e *rlqsEnvoy) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		r.mu.Lock()
		r.nextID++
		s := &rlqsStream{id: r.nextID, envoy: e, inject: make(chan *rlqspb.RateLimitQuotaUsageReports, 16)}
		r.streams[s.id] = s
		e.latest = s
		r.mu.Unlock()
		cs, err := streamer(metadata.AppendToOutgoingContext(ctx, rlqsStreamKey, strconv.FormatUint(s.id, 10)), desc, cc, method, opts...)
		if err != nil {
			r.mu.Lock()
			s.clientEnded = true
			r.changedLocked()
			r.mu.Unlock()
			return nil, err
		}
		return &rlqsClientStream{ClientStream: cs, r: r, s: s}, nil
	}
}

type rlqsClientStream struct {
	grpc.ClientStream
	r *rlqsRun
	s *rlqsStream
}

func (c *rlqsClientStream) SendMsg(m any) error {
	if rep, ok := m.(*rlqspb.RateLimitQuotaUsageReports); ok && c.r.sc.Liar == c.s.envoy.index+1 {
		m = lie(rep)
	}
	c.r.mu.Lock()
	c.s.up = append(c.s.up, c.r.clk.time())
	c.r.mu.Unlock()
	err := c.ClientStream.SendMsg(m)
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if err == nil {
		c.s.clientSent++
		c.r.dirty = true
	} else {
		c.s.up = c.s.up[:len(c.s.up)-1]
	}
	c.r.changedLocked()
	return err
}

func (c *rlqsClientStream) RecvMsg(m any) error {
	err := c.ClientStream.RecvMsg(m)
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if err == nil {
		c.s.clientRecv++
		c.r.crossedLocked(&c.s.down, "a response")
	} else {
		c.s.clientEnded = true
	}
	c.r.changedLocked()
	return err
}

// lie is rep as the schedule's liar sends it: every periodic usage (not
// the immediate report of a bucket's first request, elapsed 0) counts as
// many requests as a report may, all but those allowed denied
// (rlqs.MaxReportCount in all: one more and the usage is refused).
func lie(rep *rlqspb.RateLimitQuotaUsageReports) *rlqspb.RateLimitQuotaUsageReports {
	out := proto.Clone(rep).(*rlqspb.RateLimitQuotaUsageReports)
	for _, u := range out.GetBucketQuotaUsages() {
		if u.GetTimeElapsed().AsDuration() > 0 {
			u.NumRequestsDenied = rlqs.MaxReportCount - u.GetNumRequestsAllowed()
		}
	}
	return out
}

// crossedLocked checks that the oldest message in flight on q crosses at
// the instant it was sent: if the clock moved meanwhile the run did not
// settle, and what it tells is not what the schedule drew (an assignment
// delivered later than the guard, say). That is the checker's failure,
// never a bound's.
func (r *rlqsRun) crossedLocked(q *[]time.Time, what string) {
	if len(*q) == 0 {
		return
	}
	sent := (*q)[0]
	*q = (*q)[1:]
	if now := r.clk.time(); !now.Equal(sent) && r.bad == nil {
		r.bad = fmt.Errorf("rlqs run: %s sent at %v crossed at %v: the run did not settle before the clock moved", what, sent.Sub(Start), now.Sub(Start))
	}
}

// serverInterceptor wraps each stream sidecar s serves: it counts what
// crosses it, lets the driver inject barriers between the Envoy's
// reports, and swallows their answers.
func (r *rlqsRun) serverInterceptor(sc *rlqsSidecar) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		var id uint64
		if v := md.Get(rlqsStreamKey); len(v) == 1 {
			id, _ = strconv.ParseUint(v[0], 10, 64)
		}
		r.mu.Lock()
		s := r.streams[id]
		if s == nil {
			r.mu.Unlock()
			return errors.New("boundcheck: a stream no Envoy opened")
		}
		s.sidecar, s.serverStarted = sc, true
		r.changedLocked()
		r.mu.Unlock()
		w := &rlqsServerStream{ServerStream: ss, r: r, s: s, real: make(chan rlqsRecv), done: make(chan struct{})}
		go w.read()
		err := handler(srv, w)
		close(w.done)
		r.mu.Lock()
		s.serverEnded, r.dirty = true, true
		r.changedLocked()
		r.mu.Unlock()
		return err
	}
}

type rlqsRecv struct {
	msg *rlqspb.RateLimitQuotaUsageReports
	err error
}

type rlqsServerStream struct {
	grpc.ServerStream
	r    *rlqsRun
	s    *rlqsStream
	real chan rlqsRecv
	done chan struct{}
}

// read reads the Envoy's reports for RecvMsg, until the stream ends.
func (w *rlqsServerStream) read() {
	for {
		m := new(rlqspb.RateLimitQuotaUsageReports)
		err := w.ServerStream.RecvMsg(m)
		select {
		case w.real <- rlqsRecv{m, err}:
		case <-w.done:
			return
		}
		if err != nil {
			return
		}
	}
}

// RecvMsg is the Envoy's next report, or a barrier the driver injected
// once every report sent before it was received.
func (w *rlqsServerStream) RecvMsg(m any) error {
	select {
	case got := <-w.real:
		if got.err != nil {
			return got.err
		}
		proto.Merge(m.(proto.Message), got.msg)
		w.r.mu.Lock()
		w.s.serverRecv++
		w.r.crossedLocked(&w.s.up, "a report")
		w.r.changedLocked()
		w.r.mu.Unlock()
		return nil
	case b := <-w.s.inject:
		proto.Merge(m.(proto.Message), b)
		return nil
	}
}

func (w *rlqsServerStream) SendMsg(m any) error {
	// A message carries every action due on the stream (up to 1,000): the
	// barriers' answers among them are taken out and counted, the rest
	// sent on.
	// The acks are counted once the rest is sent (and counted as sent):
	// counted before, the driver could find the barrier answered and
	// every message sent delivered while the rest was still on its way.
	acks := 0
	if resp, ok := m.(*rlqspb.RateLimitQuotaResponse); ok {
		var rest []*rlqspb.RateLimitQuotaResponse_BucketAction
		for _, a := range resp.GetBucketAction() {
			if a.GetBucketId().GetBucket()[rlqsBarrierKey] != "" {
				acks++
				continue
			}
			rest = append(rest, a)
		}
		if acks > 0 {
			defer func() {
				w.r.mu.Lock()
				w.s.acks += acks
				w.s.sidecar.acks += int64(acks)
				w.r.changedLocked()
				w.r.mu.Unlock()
			}()
			if len(rest) == 0 {
				return nil
			}
			m = &rlqspb.RateLimitQuotaResponse{BucketAction: rest}
		}
	}
	w.r.mu.Lock()
	w.s.down = append(w.s.down, w.r.clk.time())
	w.r.mu.Unlock()
	err := w.ServerStream.SendMsg(m)
	w.r.mu.Lock()
	if err == nil {
		w.s.serverSent++
	} else {
		w.s.down = w.s.down[:len(w.s.down)-1]
	}
	w.r.changedLocked()
	w.r.mu.Unlock()
	return err
}

// rlqsStore is the run's store as its sidecars see it: every lease and
// return must be made at the instant its caller stamped it (a report, a
// timer, a landing). One made later was started by something the driver
// did not wait for before it moved the clock: the run did not settle.
type rlqsStore struct {
	gale.Store
	r *rlqsRun
}

func (s rlqsStore) Lease(ctx context.Context, key string, rule gale.Rule, min, max int64, now time.Time) (gale.Grant, error) {
	s.r.stamped(now, "a lease")
	return s.Store.Lease(ctx, key, rule, min, max, now)
}

func (s rlqsStore) Return(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd, now time.Time) error {
	s.r.stamped(now, "a return")
	return s.Store.Return(ctx, key, rule, credits, windowEnd, now)
}

// Announce records a demand in the store's ledger (gale.DemandLedger),
// stamped as leases are.
func (s rlqsStore) Announce(ctx context.Context, key string, rule gale.Rule, member string, demand int64, now time.Time) ([]gale.Demand, error) {
	s.r.stamped(now, "an announcement")
	return gale.Announce(ctx, s.Store, key, rule, member, demand, now)
}

func (r *rlqsRun) stamped(at time.Time, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.clk.time(); !now.Equal(at) && r.bad == nil {
		r.bad = fmt.Errorf("rlqs run: %s stamped %v was made at %v: the run did not settle before the clock moved", what, at.Sub(Start), now.Sub(Start))
	}
}
