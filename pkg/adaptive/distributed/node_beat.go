package distributed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/clock"
)

// Beat makes one heartbeat at now (the node's clock). It takes the report
// (seq, applied generation, in flight, L_local, demand) as one snapshot
// under the node's lock, calls the coordinator without the lock, and
// applies the grant if its generation is above the one in force (an answer
// overtaken by a later one is ignored). The grant's lease ends, on the
// node's clock, at now plus the time the coordinator gave it, at most
// LeaseTTL.
//
// Beat returns the grant as received, applied or not. A failed call
// returns the coordinator's error, wrapped; the node then follows its
// outage policy. A duplicate nodeId returns an error wrapping
// ErrDuplicateNode, also passed to OnDuplicate on this goroutine, and
// leaves the node as it was. After Leave, or once another node took this
// one over, Beat returns ErrLeft and sends nothing. Beats may overlap.
//
// The report's in flight includes the requests still in flight through the
// gates of the nodes this one took over (TakeOver); those that have drained
// are forgotten.
func (n *Node) Beat(ctx context.Context, now time.Time) (Grant, error) {
	n.mu.Lock()
	if n.left || n.next.Load() != nil {
		n.mu.Unlock()
		return Grant{}, ErrLeft
	}
	n.seq++
	n.priors = slices.DeleteFunc(n.priors, func(g *adaptive.Gate) bool { return g.Inflight() == 0 })
	// L_local is the controller's estimate: a recalibration's pin is a
	// measurement of this node's, not the backend's limit, and reported it
	// took three quarters of the node's part off L_global (mean), or set
	// L_global to it (min).
	inflight, local := n.inflightLocked(), n.gate.Level()
	rep := Report{Node: n.id, Instance: n.instance, Seq: n.seq, Local: local, Inflight: inflight,
		AppliedGen: n.appliedGen, Demand: min(local, inflight+n.refusedSince)}
	n.refusedSince = 0
	n.mu.Unlock()

	g, err := n.coord.Heartbeat(ctx, n.key, rep, n.fleet, now)

	n.mu.Lock()
	n.n.roundTrips++
	if err != nil {
		n.n.errors++
		dup := errors.Is(err, ErrDuplicateNode)
		if dup {
			n.n.duplicates++ // not an outage: the node keeps its state
			n.dupSeq = max(n.dupSeq, rep.Seq)
		} else {
			n.failSeq = max(n.failSeq, rep.Seq)
		}
		n.mu.Unlock()
		err = fmt.Errorf("distributed: node %q heartbeat %d: %w", n.id, rep.Seq, err)
		if dup && n.onDuplicate != nil {
			n.onDuplicate(err)
		}
		return Grant{}, err
	}
	n.okSeq = max(n.okSeq, rep.Seq)
	n.issuedGen = max(n.issuedGen, g.Gen)
	if g.Status == Granted {
		n.ackedGen = max(n.ackedGen, rep.AppliedGen)
	}
	if g.Gen > n.appliedGen {
		n.applyLocked(g, now)
	}
	n.mu.Unlock()
	return g, nil
}

// applyLocked puts g, the answer to a heartbeat sent at sent, in force.
func (n *Node) applyLocked(g Grant, sent time.Time) {
	first, old := n.appliedGen == 0, n.share
	n.appliedGen, n.share = g.Gen, max(0, g.Share)
	if g.Status == Granted { // a Stale answer carries no Global
		n.global, n.live = g.Global, g.Live
		n.leashLocked()
	}
	us := min(max(g.ExpiresAt-g.Now, 0), n.fleet.LeaseTTL.Microseconds())
	n.leaseEnd = sent.Add(time.Duration(us) * time.Microsecond)
	if sent.Before(n.leaseEnd.Add(-n.margin)) {
		n.fenceFired = false // unfenced: the next fence is a new episode
	}
	if n.eager == nil {
		return
	}
	if n.share != old {
		if !first {
			n.kickLocked()
		}
		// Over a changed share, in flight can only be draining to it.
		n.drainArmed.Store(n.inflightLocked() > n.share)
	}
}

// leashLocked keeps the controller's estimate of L_local within a quarter
// of L_global either side, moving it to the band's edge when it is outside
// (adaptive.Rebaser; a controller that is not one is left alone).
//
// Under a share, a node's samples count its in flight as a fraction of
// its share scaled to its own limit, and its controller grows and cuts in
// those units, so each node's L_local drifts in units of its own: four
// coordinated gradient2 sidecars in make bench-gate were seen at L_local
// 14, 18, 33 and 73 under an L_global of 34, and four aimd ones held 33 in
// flight under an L_global of 48 (a node whose L_local is below its share
// admits under its L_local). A node high above L_global finds its knee in
// its own units, above the backend's. Within the band every node counts
// in the fleet's units, near enough, and what a node learned since its
// last report still counts in its next (a full rebase to L_global would
// drop it, and with L_global the mean rounded down, a fleet growing one
// step a heartbeat would not grow at all).
func (n *Node) leashLocked() {
	if n.global <= 0 {
		return
	}
	band := max(1, n.global/4)
	if level := n.gate.Level(); level < n.global-band || level > n.global+band {
		n.gate.Rebase(n.clk.Now(), min(max(level, n.global-band), n.global+band))
	}
}

// Run beats at once, then every Heartbeat, and off-cycle on eager triggers,
// until ctx ends; it returns ctx.Err() once the call in progress, if any,
// has returned. Calls to the coordinator run one at a time, in their own
// goroutine, each with a context deadline of LeaseTTL (real time: a later
// answer could only bring a lease already over); a tick during a call
// beats when it returns. So Run fires OnFenced on time even while a call
// hangs. Call it once.
func (n *Node) Run(ctx context.Context) error {
	tick := n.clk.NewTicker(n.heartbeat)
	defer tick.Stop()
	var (
		done                      = make(chan struct{}, 1)
		busy, wantTick, wantEager bool
		lastEager                 time.Time
		debounce, fence           clock.Timer
		debounceC, fenceC         <-chan time.Time
		debouncing                bool
	)
	defer func() {
		for _, t := range []clock.Timer{debounce, fence} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	start := func(offCycle bool) {
		now := n.clk.Now()
		busy, wantTick, wantEager = true, false, false
		if offCycle {
			lastEager = now
			n.mu.Lock()
			n.n.eagerBeats++
			n.mu.Unlock()
		}
		go func() {
			cctx, cancel := context.WithTimeout(ctx, n.fleet.LeaseTTL)
			defer cancel()
			n.Beat(cctx, now) // its outcome is in Stats and the callbacks
			done <- struct{}{}
		}()
	}
	start(false)
	for {
		select {
		case <-ctx.Done():
			if busy {
				<-done
			}
			return ctx.Err()
		case <-tick.C():
			wantTick = true
		case <-n.eager: // nil, never ready, without eager beats
			wantEager = true
		case <-debounceC:
			debouncing = false
		case <-fenceC:
			n.checkFence(n.clk.Now())
		case <-done:
			busy = false
			if at, ok := n.fenceAt(); ok {
				switch now := n.clk.Now(); {
				case !now.Before(at):
					n.checkFence(now)
				case fence == nil:
					fence = n.clk.NewTimer(at.Sub(now))
					fenceC = fence.C()
				default:
					fence.Reset(at.Sub(now))
				}
			}
		}
		switch {
		case busy:
		case wantTick:
			start(false)
		case wantEager && !debouncing:
			now := n.clk.Now()
			if wait := lastEager.Add(n.debounce).Sub(now); lastEager.IsZero() || wait <= 0 {
				start(true)
			} else {
				debouncing = true
				if debounce == nil {
					debounce = n.clk.NewTimer(wait)
					debounceC = debounce.C()
				} else {
					debounce.Reset(wait)
				}
			}
		}
	}
}

// fenceAt is when the grant in force fences the node, if it can.
func (n *Node) fenceAt() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.leaseEnd.Add(-n.margin), n.selfFence && n.appliedGen > 0
}

// checkFence starts a fencing episode if the node is fenced at now.
func (n *Node) checkFence(now time.Time) {
	n.mu.Lock()
	fire := n.fenceLocked(n.modeLocked(now))
	n.mu.Unlock()
	if fire {
		n.onFenced()
	}
}
