package redisfed_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sent is a go-redis hook that records each command its client is handed,
// with when and under what deadline: what a test judges the store's round
// trips by, rather than by how long they took. Add it before the store is
// made (its dispatchers' pipelines are built then).
type sent struct {
	mu   sync.Mutex
	cmds []sentCmd
}

type sentCmd struct {
	args     []string  // the command and its arguments, as fmt prints them
	began    time.Time // when the client was handed it (monotonic)
	deadline time.Time // its context's deadline; zero when none
}

var _ redis.Hook = (*sent)(nil)

func (s *sent) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.record(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (s *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.record(ctx, c)
		}
		return next(ctx, cmds)
	}
}

func (s *sent) record(ctx context.Context, cmd redis.Cmder) {
	c := sentCmd{began: time.Now()}
	c.deadline, _ = ctx.Deadline()
	for _, a := range cmd.Args() {
		c.args = append(c.args, fmt.Sprint(a))
	}
	s.mu.Lock()
	s.cmds = append(s.cmds, c)
	s.mu.Unlock()
}

// take returns the commands recorded since the last take, those named name
// only when name is not empty.
func (s *sent) take(name string) []sentCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sentCmd
	for _, c := range s.cmds {
		if name == "" || strings.EqualFold(c.args[0], name) {
			out = append(out, c)
		}
	}
	s.cmds = nil
	return out
}
