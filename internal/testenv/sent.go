package testenv

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sent is a go-redis hook that records each command its client is handed,
// with when and under what deadline: what a test judges a store's round
// trips by, rather than by how long they took. Add it (client.AddHook)
// before a store is made over the client (a store's pipelines are built
// then). It is safe for concurrent use.
type Sent struct {
	mu   sync.Mutex
	cmds []SentCmd
}

// SentCmd is one command as the client was handed it.
type SentCmd struct {
	Args     []string  // the command and its arguments, as fmt prints them
	Began    time.Time // when the client was handed it (monotonic)
	Deadline time.Time // its context's deadline; zero when none
}

var _ redis.Hook = (*Sent)(nil)

// DialHook passes dials through.
func (s *Sent) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records each command.
func (s *Sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.record(ctx, cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records each command of a pipeline.
func (s *Sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			s.record(ctx, c)
		}
		return next(ctx, cmds)
	}
}

func (s *Sent) record(ctx context.Context, cmd redis.Cmder) {
	c := SentCmd{Began: time.Now()}
	c.Deadline, _ = ctx.Deadline()
	for _, a := range cmd.Args() {
		c.Args = append(c.Args, fmt.Sprint(a))
	}
	s.mu.Lock()
	s.cmds = append(s.cmds, c)
	s.mu.Unlock()
}

// Take returns the commands recorded since the last Take, those named name
// only when name is not empty.
func (s *Sent) Take(name string) []SentCmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SentCmd
	for _, c := range s.cmds {
		if name == "" || strings.EqualFold(c.Args[0], name) {
			out = append(out, c)
		}
	}
	s.cmds = nil
	return out
}

// ServerTime is c's server's clock (TIME, to the microsecond): read before
// and after a call, it brackets the instant a script running on the
// server's clock saw, with no reliance on this machine's clock.
func ServerTime(t testing.TB, c redis.UniversalClient) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StoreDeadline)
	defer cancel()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	return now
}
