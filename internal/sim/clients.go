package sim

// client is one closed-loop client (see Clients): it has at most one
// request in progress, and at most one attempt at it outstanding.
type client struct {
	// tries counts the attempts at the current request; 0 when the client
	// has none in progress.
	tries int
}

// startClients wakes every client at time 0, in order.
func (r *run) startClients() {
	for range r.sc.Clients.Count {
		r.push(event{at: 0, kind: evWake, cl: &client{}})
	}
}

// wake has c issue an attempt: a retry of its request, or the first try at
// a new one if work remains (else c stays idle for the rest of the run: the
// requests left are in progress at other clients, and one that fails frees
// its own client to start the next).
func (r *run) wake(c *client) {
	w := r.sc.Clients
	if c.tries == 0 {
		if r.finished || (w.Requests > 0 && r.stats.Delivered+r.inProgress >= w.Requests) {
			return
		}
		r.inProgress++
		r.stats.Requests++
	}
	c.tries++
	r.stats.Attempts++
	if c.tries > 1 {
		r.stats.Retries++
		r.cur.Retries++
	}
	req := &request{arrive: r.now, jitter: r.sc.Backend.drawJitter(r.jitter), client: c}
	r.cur.Arrived++
	// Scheduled before any answer, so a timeout and an answer at the same
	// instant end the attempt as a timeout.
	r.schedule(r.now+w.Timeout, evGiveUp, req)
	r.offer(req)
}

// attemptFailed has c retry after its backoff, or give the request up once
// it has had its retries and move on to the next after its think time.
func (r *run) attemptFailed(c *client) {
	w := r.sc.Clients
	if c.tries <= w.Retries {
		r.push(event{at: r.now + w.Backoff.Delay(c.tries), kind: evWake, cl: c})
		return
	}
	r.stats.Failed++
	r.next(c)
}

// delivered records c's request as answered OK; the run finishes with the
// last of the work.
func (r *run) delivered(c *client) {
	r.stats.Delivered++
	r.next(c)
	if w := r.sc.Clients; w.Requests > 0 && r.stats.Delivered == w.Requests {
		r.finished = true
		r.stats.End, r.stats.Finished = r.now, true
	}
}

// next ends c's request and wakes c for its next after its think time.
func (r *run) next(c *client) {
	r.inProgress--
	c.tries = 0
	r.push(event{at: r.now + r.sc.Clients.Think, kind: evWake, cl: c})
}
