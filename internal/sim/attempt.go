package sim

import (
	"slices"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
)

// An attempt's path: offer puts it to the gate, which admits it (admit),
// queues it (drain admits it later) or refuses it (refuse). Admitted, the
// backend serves it, defers it or drops it; answer ends a served or deferred
// one, giveUp one whose client timed out first. Each of refuse, answer and
// giveUp ends an attempt at most once (request.ended).

// offer puts req to the gate: admitted at once, queued, or refused.
func (r *run) offer(req *request) {
	if r.queued == 0 {
		if lease, ok := r.gate.TryAcquire(epoch.Add(r.now)); ok {
			r.admit(req, lease)
			return
		}
	}
	if r.queued >= r.sc.Queue.Max {
		r.cur.Rejected++
		r.refuse(req)
		return
	}
	if r.queued == 0 {
		clear(r.queue)
		r.queue, r.qhead = r.queue[:0], 0 // only timed-out entries are left
	}
	req.queued = true
	r.queue = append(r.queue, req)
	r.queued++
	r.schedule(r.now+r.sc.Queue.Timeout, evTimeout, req)
}

// refuse ends req, which the gate turned away (queue full, or timed out in
// the queue); its client, if any, retries.
func (r *run) refuse(req *request) {
	req.ended = true
	r.stats.Rejected++
	r.drops = append(r.drops, r.now)
	if req.client != nil {
		r.attemptFailed(req.client)
	}
}

// admit starts req at the backend with the gate's lease. The backend
// decides, from its concurrency and capacity now, when it answers; a
// dropped request gets no answer.
func (r *run) admit(req *request, lease adaptive.Lease) {
	r.inflight++
	req.admit, req.lease = r.now, lease
	r.cur.Admitted++
	v, after := r.backend.accept(r.now, r.sc.Backend.capacityAt(r.now), req.jitter)
	switch v {
	case dropIt:
		r.stats.Dropped++
		return // only its client's timeout ends it
	case deferIt:
		req.deferred = true
	}
	req.atBackend = true
	r.schedule(r.now+after, evDone, req)
}

// answer is the backend's answer to req. Unless its client gave up on it,
// it releases the lease (which feeds the controller) with OK, or Error for
// a deferral, and admits waiters into the freed slot.
func (r *run) answer(req *request) {
	req.atBackend = false
	r.backend.inflight--
	switch {
	case req.ended:
		return // abandoned: the backend finished working on it for nobody
	case req.deferred:
		r.fail(req, adaptive.Error)
		return
	}
	req.ended = true
	r.inflight--
	req.lease.Release(epoch.Add(r.now), adaptive.OK)
	c := completion{done: r.now, service: r.now - req.admit, wait: req.admit - req.arrive}
	r.done = append(r.done, c)
	r.stats.OK++
	r.cur.Completed++
	if c.service <= GoodFactor*r.sc.Backend.Base {
		r.cur.Good++
		r.stats.Good++
	}
	r.curLatencies = append(r.curLatencies, c.service)
	if req.client != nil {
		r.delivered(req.client)
	}
	r.drain()
}

// giveUp ends req at its client's timeout, unless it has ended.
func (r *run) giveUp(req *request) {
	if !req.ended {
		r.fail(req, adaptive.Timeout)
	}
}

// fail ends req with an error answer (o is adaptive.Error) or its client's
// timeout (adaptive.Timeout), and its client, if any, retries. A queued
// request leaves the queue (it has no lease, so the controller hears
// nothing); an admitted one releases its lease with o. The backend, if it
// is serving a request given up, goes on until its latency is up.
func (r *run) fail(req *request, o adaptive.Outcome) {
	req.ended = true
	r.failed = append(r.failed, r.now)
	if o == adaptive.Error {
		r.cur.Errors++
		r.stats.Errors++
	} else {
		r.cur.ClientTimeouts++
		r.stats.Timeouts++
	}
	if req.client != nil {
		r.attemptFailed(req.client)
	}
	if req.queued {
		req.queued = false
		r.queued--
		return
	}
	r.inflight--
	req.lease.Release(epoch.Add(r.now), o)
	r.drain()
}

// drain admits queued requests, oldest first, while the gate has room.
func (r *run) drain() {
	for r.queued > 0 {
		req := r.queue[r.qhead]
		if !req.queued { // timed out or given up
			r.popQueue()
			continue
		}
		lease, ok := r.gate.TryAcquire(epoch.Add(r.now))
		if !ok {
			return
		}
		r.popQueue()
		req.queued = false
		r.queued--
		r.admit(req, lease)
	}
	clear(r.queue) // nothing live is queued: drop the timed-out entries
	r.queue, r.qhead = r.queue[:0], 0
}

func (r *run) popQueue() {
	r.queue[r.qhead] = nil
	r.qhead++
	if r.qhead > 1024 && r.qhead*2 > len(r.queue) {
		r.queue = slices.Delete(r.queue, 0, r.qhead)
		r.qhead = 0
	}
}
