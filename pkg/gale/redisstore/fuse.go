package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// maxFused is the most fixed-window checks one script call carries: it
// bounds how long one call holds Redis (about 2µs of Redis CPU a check).
const maxFused = 128

// fusedGroup is one call of check_fixed.lua carrying the fixed-window checks
// of a round trip: what Redis spends on a script call, and on reading its
// clock, is then paid once for them all rather than once a check. Its
// buffers are the dispatcher's, reused from one round trip to the next.
type fusedGroup struct {
	reqs []*request
	args []any
	cmd  *redis.IntSliceCmd
}

// fuse appends to cmds one command per group of the fixed-window checks in
// reqs, in their order. On a *redis.Client (one server, or the primary
// Sentinel names) a group holds up to maxFused checks; on a Cluster or
// Ring client, whose keys can live on different servers, it holds one.
func (d *dispatcher) fuse(ctx context.Context, reqs []*request, eval bool, cmds []redis.Cmder) []redis.Cmder {
	size := 1
	if d.s.fuse {
		size = maxFused
	}
	d.groups = d.groups[:0]
	var g *fusedGroup
	for _, r := range reqs {
		if r.op != opCheckFixed {
			continue
		}
		if g == nil || len(g.reqs) == size {
			g = d.group()
			g.reqs = g.reqs[:0]
		}
		g.reqs = append(g.reqs, r)
	}
	sc := &scripts[opCheckFixed]
	for i := range d.groups {
		g := &d.groups[i]
		if eval {
			g.args = append(g.args[:0], "eval", sc.src, len(g.reqs))
		} else {
			g.args = append(g.args[:0], "evalsha", sc.sha, len(g.reqs))
		}
		for _, r := range g.reqs {
			g.args = append(g.args, &r.rkey)
		}
		for _, r := range g.reqs {
			// limit, period, now ("" under ServerTime), cost
			g.args = append(g.args, &r.nums[1], &r.nums[2], r.args[argNow], &r.nums[6])
		}
		g.cmd = redis.NewIntSliceCmd(ctx, g.args...)
		cmds = append(cmds, onceIntSlice{g.cmd})
	}
	return cmds
}

// group is the next fusedGroup of this round trip, its buffers reused.
func (d *dispatcher) group() *fusedGroup {
	if len(d.groups) < cap(d.groups) {
		d.groups = d.groups[:len(d.groups)+1]
	} else {
		d.groups = append(d.groups, fusedGroup{})
	}
	return &d.groups[len(d.groups)-1]
}

// unfuse records each group's reply in its requests. A check the script
// could not read (granted -1: its key is not a hash, or holds a field that
// is not an integer) took nothing; it goes to d.unread, to be asked again of
// the composed check script, whose error says what is wrong.
func (d *dispatcher) unfuse() {
	for i := range d.groups {
		g := &d.groups[i]
		val, err := g.cmd.Result()
		if err == nil && len(val) != replyLen*len(g.reqs) {
			err = fmt.Errorf("%w: %d elements for %d checks, want %d each", ErrMalformedReply, len(val), len(g.reqs), replyLen)
		}
		for j, r := range g.reqs {
			r.err = err
			if err != nil {
				continue
			}
			reply := val[j*replyLen : (j+1)*replyLen]
			if reply[0] == -1 {
				r.op = opCheck // its arguments are already the composed script's
				d.unread = append(d.unread, r)
				continue
			}
			r.nreply = copy(r.reply[:], reply)
		}
		clear(g.reqs)
		g.cmd = nil
		clear(g.args) // drop pointers into pooled requests
	}
}
