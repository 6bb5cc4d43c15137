package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durable checks (Options.WaitReplicas).
//
// Redis replicates asynchronously: it answers a script before its replicas
// have the writes. When a Sentinel failover promotes a replica, counts the
// old primary acknowledged and had not yet sent are lost, and the new
// primary admits them again. With WaitReplicas a round trip that carries a
// check ends with WAIT n timeout: Redis answers it once n replicas have
// acknowledged every write of the connection so far (the round trip's
// scripts included), or at the timeout with how many did. A check is
// answered only when they all have; otherwise it fails, and on_store_error
// decides (a count applied on the primary but failed here only makes the
// limit stricter). An admission a check answered is then on the replica
// before the caller hears of it, and survives the primary's death.
//
// Cost, measured by BenchmarkWaitReplicas (GOMAXPROCS=2, redis-server 7.0
// primary and replica on the same two loaded cores, sliding-window check,
// ServerTime; median of 5 runs of 2 s):
//
//	callers  WAIT   latency/check   Redis CPU/check (primary)
//	1        no     120.4µs         58.0µs
//	1        1      239.7µs         69.8µs
//	16       no      32.0µs         21.1µs
//	16       1       41.2µs         26.2µs
//
// A lone caller pays one primary→replica round trip more; under load the
// WAIT is shared by the round trip's checks.

// ErrNotReplicated is wrapped by the error a check returns when fewer
// replicas than Options.WaitReplicas acknowledged it within WaitTimeout.
var ErrNotReplicated = errors.New("redisstore: check not acknowledged by enough replicas")

// replicaWait is the WAIT a round trip carrying a check ends with; the zero
// value sends none.
type replicaWait struct {
	replicas  int64
	timeoutMs int64 // WAIT's timeout; ≥ 1 (0 would block for ever)
}

// newReplicaWait validates opts.WaitReplicas and WaitTimeout for client and
// a store whose round trips take at most timeout.
func newReplicaWait(client redis.UniversalClient, opts Options, timeout time.Duration) (replicaWait, error) {
	if opts.WaitReplicas < 0 || opts.WaitTimeout < 0 || opts.WaitTimeout > timeout {
		return replicaWait{}, fmt.Errorf("redisstore: options out of range: WaitReplicas %d (≥ 0), WaitTimeout %v (0..Timeout %v)",
			opts.WaitReplicas, opts.WaitTimeout, timeout)
	}
	if opts.WaitReplicas == 0 {
		return replicaWait{}, nil
	}
	if !isSingle(client) {
		return replicaWait{}, fmt.Errorf("redisstore: WaitReplicas needs a client of one server (plain or Sentinel); a %T sends a round trip's commands to several servers, and WAIT would not cover them", client)
	}
	d := opts.WaitTimeout
	if d == 0 {
		d = timeout / 2
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return replicaWait{replicas: int64(opts.WaitReplicas), timeoutMs: max(1, int64(ms))}, nil
}

// command returns the WAIT to end a round trip carrying reqs with, or nil
// when none is due: no WaitReplicas, or no check among reqs.
func (w replicaWait) command(ctx context.Context, reqs []*request) *redis.IntCmd {
	if w.replicas == 0 {
		return nil
	}
	for _, r := range reqs {
		if r.waited() {
			return redis.NewIntCmd(ctx, "wait", w.replicas, w.timeoutMs)
		}
	}
	return nil
}

// waited reports whether r's round trip waits for replicas: checks and
// charges do.
func (r *request) waited() bool {
	return r.op == opCheck || r.op == opCheckFixed || r.op == opCharge
}

// apply fails the checks of reqs that succeeded when cmd, their round
// trip's WAIT, did not get its replicas.
func (w replicaWait) apply(cmd *redis.IntCmd, reqs []*request) {
	if cmd == nil {
		return
	}
	n, err := cmd.Result()
	if err == nil && n >= w.replicas {
		return
	}
	if err == nil {
		err = fmt.Errorf("%w: %d of %d within %dms", ErrNotReplicated, n, w.replicas, w.timeoutMs)
	} else {
		err = fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	}
	for _, r := range reqs {
		if r.waited() && r.err == nil {
			r.err = err
		}
	}
}
