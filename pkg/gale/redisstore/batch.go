package redisstore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Layout of a request's command arguments:
//
//	EVALSHA sha 1 key alg limit period burst calendar now a [b]
//
// (EVAL src … after a NOSCRIPT). a and b are the operation's own arguments:
// the cost (or a charge's units); min and max; or credits and window end.
const (
	argNow    = 9
	argsCheck = 11
	argsOther = 12
	replyLen  = 6 // {granted, remaining, resetAt, retryAfter, windowEnd, now}
	// chargeReplyLen is a charge's: a take's, then over and overrun.
	chargeReplyLen = 8
)

// A request's life: pending from when a caller queues it until a dispatcher
// delivers its result (delivered) or the caller gives up on it (abandoned),
// whichever comes first. The request then belongs to the side that did not
// make the move, which hands it back to the pool: the caller once it has
// read a delivered result, the dispatcher once it is done with an abandoned
// one.
const (
	pending uint32 = iota
	delivered
	abandoned
)

// request is one operation on its way through a pipeline. Requests are pooled:
// a pooled request keeps its done channel and its argument slots, which point
// into the request itself so that filling them does not allocate.
type request struct {
	ctx  context.Context // the caller's; a dispatcher never sends a request whose ctx is done
	op   op
	key  string   // the caller's key, for error messages
	rkey string   // the Redis key
	nums [8]int64 // alg, limit, period, burst, calendar, now, a, b
	args [argsOther]any
	narg int // argsCheck or argsOther

	// Written by the dispatcher before it signals done.
	cmd    redis.Cmder
	reply  [chargeReplyLen]int64
	nreply int // elements in the reply, which may differ from what its op replies
	err    error

	state atomic.Uint32
	done  chan struct{} // capacity 1; signalled once per delivery
}

var requests = sync.Pool{New: func() any {
	r := &request{done: make(chan struct{}, 1)}
	r.args[2] = "1" // numkeys
	r.args[3] = &r.rkey
	for i := 0; i < len(r.nums); i++ {
		r.args[4+i] = &r.nums[i]
	}
	return r
}}

func getRequest() *request { return requests.Get().(*request) }

// putRequest returns r to the pool. Only its owner may call it (see pending).
func putRequest(r *request) {
	r.ctx, r.cmd, r.err, r.key, r.rkey = nil, nil, nil, "", ""
	r.nreply = 0
	r.state.Store(pending)
	requests.Put(r)
}

// command builds r's EVALSHA, or its EVAL when eval is set.
func (r *request) command(ctx context.Context, eval bool) redis.Cmder {
	sc := &scripts[r.op]
	if eval {
		r.args[0], r.args[1] = "eval", sc.src
	} else {
		r.args[0], r.args[1] = "evalsha", sc.sha
	}
	if r.op == opReturn {
		return onceInt{redis.NewIntCmd(ctx, r.args[:r.narg]...)}
	}
	return onceIntSlice{redis.NewIntSliceCmd(ctx, r.args[:r.narg]...)}
}

// record copies the result of r.cmd into r.
func (r *request) record() {
	switch c := r.cmd.(type) {
	case onceIntSlice:
		val, err := c.Result()
		r.err = err
		r.nreply = len(val)
		copy(r.reply[:], val)
	case onceInt:
		r.err = c.Err()
	}
	r.cmd = nil
}

// onceIntSlice and onceInt are the store's commands: go-redis never sends
// one again. A resend after a lost reply would apply an operation twice,
// and a Cluster client resends a node's pipeline after a network error,
// or after a LOADING, CLUSTERDOWN or TRYAGAIN reply to its first command,
// up to MaxRedirects times whatever its MaxRetries says. MOVED and ASK
// redirections, which mean the operation did not run, are still followed.
// (One pointer field: a value converts to redis.Cmder without allocating.)
type (
	onceIntSlice struct{ *redis.IntSliceCmd }
	onceInt      struct{ *redis.IntCmd }
)

func (onceIntSlice) NoRetry() bool { return true }
func (onceInt) NoRetry() bool      { return true }

// onceCmd is AtMostOnce's command.
type onceCmd struct{ *redis.Cmd }

func (onceCmd) NoRetry() bool { return true }

// AtMostOnce returns cmd as a command go-redis never sends again, as the
// store's own are (see onceIntSlice): process the result, then read cmd. For
// scripts that must apply once, such as federation's escrow.
func AtMostOnce(cmd *redis.Cmd) redis.Cmder { return onceCmd{cmd} }

// dispatcher is one of the Store's Pipelines goroutines: it takes a request,
// drains whatever else is queued (up to MaxBatch) without waiting, and sends
// them all in one round trip.
type dispatcher struct {
	s     *Store
	pipe  redis.Pipeliner
	batch []*request
	retry []*request
	cmds  []redis.Cmder // a round trip's commands

	groups []fusedGroup // a round trip's fixed-window checks (fuse.go)
	unread []*request   // fixed-window checks to ask the composed script
}

func (d *dispatcher) run() {
	defer d.s.wg.Done()
	for {
		select {
		case r := <-d.s.queue:
			d.batch = append(d.batch[:0], r)
		case <-d.s.closing:
			return
		}
	drain:
		for len(d.batch) < d.s.maxBatch {
			select {
			case r := <-d.s.queue:
				d.batch = append(d.batch, r)
			default:
				break drain
			}
		}
		d.send(d.batch)
		clear(d.batch) // drop references to requests now back in the pool
	}
}

// send carries out batch: its live requests in one round trip, then those
// that failed with NOSCRIPT as EVALs in a second one; then it delivers every
// result. Requests whose caller has gone are not sent.
func (d *dispatcher) send(batch []*request) {
	s := d.s
	live := batch[:0]
	for _, r := range batch {
		if r.state.Load() != pending || r.ctx.Err() != nil {
			r.err = r.ctx.Err()
			s.deliver(r)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// The store's timeout, not a caller's context: callers come and go
	// independently, and a dead server must not hold a dispatcher longer.
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.ops.Add(uint64(len(live)))
	d.retry, d.unread = d.retry[:0], d.unread[:0]
	d.roundTripOrEval(ctx, live)
	if len(d.unread) > 0 {
		// Rare: a key in a state the fixed-window script does not read.
		// The composed script answers it, or says what is wrong.
		d.retry = append(d.retry, d.unread...)
		clear(d.unread)
		d.unread = d.unread[:0]
		d.roundTripOrEval(ctx, d.retry)
		clear(d.retry)
	}
	for _, r := range live {
		if r.err != nil {
			s.failures.Add(1)
		}
		s.deliver(r) // r may be back in the pool after this
	}
}

// roundTripOrEval sends reqs in one round trip, then those that failed with
// NOSCRIPT as EVALs in a second one.
func (d *dispatcher) roundTripOrEval(ctx context.Context, reqs []*request) {
	d.roundTrip(ctx, reqs, false)
	retry := d.retry[len(d.retry):] // after what d.retry holds (the caller's reqs)
	for _, r := range reqs {
		if r.err != nil && redis.HasErrorPrefix(r.err, "NOSCRIPT") {
			retry = append(retry, r)
		}
	}
	if len(retry) > 0 {
		d.roundTrip(ctx, retry, true)
		clear(retry)
	}
}

// roundTrip sends reqs in one pipeline (or as one command) and records each
// result in its request. Fixed-window checks travel together (fuse.go).
func (d *dispatcher) roundTrip(ctx context.Context, reqs []*request, eval bool) {
	d.s.roundTrips.Add(1)
	cmds := d.cmds[:0]
	for _, r := range reqs {
		if r.op != opCheckFixed {
			r.cmd = r.command(ctx, eval)
			cmds = append(cmds, r.cmd)
		}
	}
	cmds = d.fuse(ctx, reqs, eval, cmds)
	wait := d.s.wait.command(ctx, reqs) // nil unless Options.WaitReplicas (wait.go)
	if wait != nil {
		cmds = append(cmds, wait)
	}
	if len(cmds) == 1 {
		_ = d.s.client.Process(ctx, cmds[0])
	} else {
		for _, c := range cmds {
			_ = d.pipe.Process(ctx, c)
		}
		// Exec reports the first command's error; each command keeps its own.
		_, _ = d.pipe.Exec(ctx)
	}
	clear(cmds)
	d.cmds = cmds[:0]
	for _, r := range reqs {
		if r.op != opCheckFixed {
			r.record()
		}
	}
	d.unfuse()
	d.s.wait.apply(wait, reqs)
}

// deliver hands r's result to its caller, or back to the pool when the caller
// has abandoned it.
func (s *Store) deliver(r *request) {
	if r.state.CompareAndSwap(pending, delivered) {
		r.done <- struct{}{}
		return
	}
	putRequest(r)
}

// do queues r and waits for its result. On nil the caller owns r again and
// must putRequest it; on an error r is no longer the caller's.
func (s *Store) do(ctx context.Context, r *request) error {
	select {
	case <-s.closing:
		putRequest(r)
		return ErrClosed
	default:
	}
	select {
	case s.queue <- r:
	case <-ctx.Done():
		putRequest(r)
		return ctx.Err()
	case <-s.closing:
		putRequest(r)
		return ErrClosed
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		if r.state.CompareAndSwap(pending, abandoned) {
			return ctx.Err()
		}
	case <-s.stopped:
		// No dispatcher is left to deliver r.
		if r.state.CompareAndSwap(pending, abandoned) {
			return ErrClosed
		}
	}
	<-r.done // delivered while we were giving up: take the result
	return nil
}
