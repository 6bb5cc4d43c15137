package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Distributed gates across reloads. A gate whose identity is unchanged
// keeps its node, and the node its heartbeats. A gate rebuilt under the
// same name (its definition changed) gets a new node, which takes the old
// one over before the new policy is swapped in (distributed.Node.TakeOver):
// it carries on the old node's record at the coordinator, its grant and
// its requests in flight, so the coordinator never sees a second instance
// of this sidecar's --node-id, and the gate admits across the reload. A
// gate dropped (or rebuilt where the old node cannot be taken over: its
// coordinator changed) drains its node: it admits nothing, beats on while
// requests still hold it, then leaves its fleet, at once when none does.

// nodeRun is a distributed gate's node and its heartbeats, carried across
// reloads with the gate. stop and done are nil until Load starts it, and
// set once, with Engine.loadMu held.
type nodeRun struct {
	name string // the gate's
	node *distributed.Node
	stop context.CancelFunc
	done chan struct{} // closed when Run has returned
}

// halt stops r's heartbeats and waits until Run has returned or ctx ends.
func (r *nodeRun) halt(ctx context.Context) error {
	if r.stop == nil {
		return nil
	}
	r.stop()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drains are the nodes of dropped gates that still have requests in
// flight: each beats until they end, then leaves. The zero value is not
// ready: New sets ctx.
type drains struct {
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	// mu guards runs, and is held while a drained node leaves and while
	// Load looks for nodes to take over: a node is either taken over or
	// gone from its fleet, never refused as the new node's duplicate.
	mu   sync.Mutex
	runs map[*nodeRun]bool
	wg   sync.WaitGroup
}

// startNodes starts the heartbeats of c's distributed gates that do not
// run yet.
func startNodes(c *compiled) {
	for _, g := range c.gates {
		if g.run == nil || g.run.stop != nil {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		g.run.stop, g.run.done = cancel, make(chan struct{})
		go func(r *nodeRun) {
			defer close(r.done)
			_ = r.node.Run(ctx)
		}(g.run)
	}
}

// takeOver lets each new node of next take over the node it replaces: the
// node of prev's gate of the same name (whose definition changed), or of a
// gate dropped earlier that still drains. It stops the heartbeats of the
// nodes taken over and returns them. Call it before next is swapped in:
// until then the old node admits, and from TakeOver on it passes its
// admissions to the new one.
func (e *Engine) takeOver(ctx context.Context, next, prev *compiled) map[*nodeRun]bool {
	kept := map[*nodeRun]bool{}
	for _, g := range next.gates {
		if g.run != nil {
			kept[g.run] = true
		}
	}
	taken := map[*nodeRun]bool{}
	e.drains.mu.Lock()
	defer e.drains.mu.Unlock()
	for _, g := range next.gates {
		if g.run == nil || g.run.stop != nil {
			continue
		}
		var olds []*nodeRun
		for _, p := range prev.gates {
			if p.run != nil && p.run.name == g.run.name && !kept[p.run] {
				olds = append(olds, p.run)
			}
		}
		for r := range e.drains.runs {
			if r.name == g.run.name {
				olds = append(olds, r)
			}
		}
		for _, old := range olds {
			if err := g.run.node.TakeOver(old.node); err != nil {
				continue // another coordinator: old drains and leaves
			}
			taken[old] = true
			delete(e.drains.runs, old) // its goroutine ends: Drain's channel is closed
			if err := old.halt(ctx); err != nil {
				// Run still returns soon: a beat it sends now gets ErrLeft.
				e.log.Warn("distributed gate: the replaced node's heartbeats did not stop in time", "gate", old.name, "err", err)
			}
			break
		}
	}
	return taken
}

// retireNodes drains the nodes of prev's gates that next no longer uses
// and that no new node took over: each leaves its fleet once its requests
// have ended, before retireNodes returns when none is in flight, else in
// the background.
func (e *Engine) retireNodes(ctx context.Context, next, prev *compiled, taken map[*nodeRun]bool) {
	kept := map[*nodeRun]bool{}
	for _, g := range next.gates {
		if g.run != nil {
			kept[g.run] = true
		}
	}
	for _, g := range prev.gates {
		r := g.run
		if r == nil || kept[r] || taken[r] {
			continue
		}
		drained := r.node.Drain()
		select {
		case <-drained:
			if err := leave(ctx, r); err != nil {
				e.log.Warn(leaveFailed, "gate", r.name, "err", err)
			}
			continue
		default:
		}
		d := &e.drains
		d.mu.Lock()
		if d.runs == nil {
			d.runs = map[*nodeRun]bool{}
		}
		d.runs[r] = true
		d.mu.Unlock()
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			select {
			case <-drained:
			case <-d.ctx.Done():
				return // Close leaves it
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			if !d.runs[r] {
				return // taken over meanwhile
			}
			if err := leave(d.ctx, r); err != nil && d.ctx.Err() != nil {
				return // Close leaves it
			} else if err != nil {
				e.log.Warn(leaveFailed, "gate", r.name, "err", err)
			}
			delete(d.runs, r)
		}()
	}
}

const leaveFailed = "distributed gate: leaving the fleet of a dropped gate failed; its record ends with its lease"

// leave stops r's heartbeats and takes its drained node out of its fleet.
func leave(ctx context.Context, r *nodeRun) error {
	if err := r.halt(ctx); err != nil {
		return err
	}
	_, err := r.node.Leave(ctx)
	return err
}

// leaveNodes takes c's distributed gates, and the dropped ones still
// draining, out of their fleets once their heartbeats have stopped: each
// node's record goes at once, so the other sidecars take its share at
// their next beats rather than when its lease ends. A node with requests
// still in flight stays (its lease reserves them and ends on its own);
// that is not an error.
func (e *Engine) leaveNodes(ctx context.Context, c *compiled) error {
	d := &e.drains
	d.cancel()
	d.wg.Wait() // the drains' goroutines return at once
	d.mu.Lock()
	runs := make([]*nodeRun, 0, len(c.gates)+len(d.runs))
	for r := range d.runs {
		runs = append(runs, r)
	}
	d.runs = nil
	d.mu.Unlock()
	for _, g := range c.gates {
		if g.run != nil {
			runs = append(runs, g.run)
		}
	}
	for _, r := range runs {
		if r.stop != nil {
			r.stop()
		}
	}
	var errs []error
	for _, r := range runs {
		if r.done == nil {
			continue
		}
		if err := r.halt(ctx); err != nil {
			return err
		}
		if _, err := r.node.Leave(ctx); err != nil && !errors.Is(err, distributed.ErrInFlight) {
			errs = append(errs, fmt.Errorf("gate %s: %w", r.name, err))
		}
	}
	return errors.Join(errs...)
}
