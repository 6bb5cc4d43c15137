package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Watch notices when the Redis server a client talks to is a new one: a
// server restarted (its dataset empty, unless it persists) or a replica
// promoted by a failover (without what replication had not yet carried).
// Either may have forgotten counts the store acknowledged, and the windows
// in place then admit them again; a Store given the watch
// (Options.Watch) reports the count to its limiters (Store.Forgot,
// gale.Forgetful), which keep the denials they were given.
//
// Install OnConnect as the client's OnConnect (redis.Options,
// ClusterOptions or FailoverOptions). It asks INFO server on each new
// connection and compares the server's run_id with the one last seen at
// that address: one round trip per connection, none per command. Every
// connection after a restart is new, and go-redis runs OnConnect before the
// connection carries anything, so the count is raised before any call
// reaches the new server. A proxy that keeps the client's connections open
// across a server's restart (twemproxy, Envoy's Redis proxy) hides it.
//
// Set the callbacks before the client connects; the zero value is ready to
// use otherwise. A Watch is safe for concurrent use.
type Watch struct {
	// OnRestart, when set, is called once for each new server found, on
	// the goroutine whose connection found it (before that connection
	// carries anything): it should return quickly.
	OnRestart func(Restart)
	// OnBlind, when set, is called once if a server refuses INFO (an ACL
	// without +info, a renamed command): restarts then go unseen and
	// Restarts stays where it is. Connections are not refused for it.
	OnBlind func(error)

	mu     sync.Mutex
	runIDs map[string]string // by server: its client's address
	n      atomic.Uint64
	blind  atomic.Bool
}

// Restart describes a server a Watch found to be new.
type Restart struct {
	// Server is the address the client knows the server by:
	// "FailoverClient" for the primary a Sentinel names.
	Server string
	// Was and Now are the run_ids of the server seen before and of the new
	// one.
	Was, Now string
	// Uptime is how long the new server has been up: seconds after a
	// restart, longer for a promoted replica.
	Uptime time.Duration
	// AppendOnly reports whether the new server keeps an append-only file
	// (appendonly yes): it then came back with what it had written there
	// (everything with appendfsync always, all but about the last second
	// with everysec).
	AppendOnly bool
}

// Restarts is how many new servers the watch has found since it was made.
func (w *Watch) Restarts() uint64 { return w.n.Load() }

// OnConnect is the client's OnConnect hook: it asks the server on cn who it
// is. It returns an error only when the connection failed (the connection
// is then dropped, as it would be anyway); a server that refuses INFO is
// reported once to OnBlind and the connection kept.
func (w *Watch) OnConnect(ctx context.Context, cn *redis.Conn) error {
	if w.blind.Load() {
		return nil
	}
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) {
			if !w.blind.Swap(true) && w.OnBlind != nil {
				w.OnBlind(err)
			}
			return nil
		}
		return err
	}
	f := infoFields(info)
	if f["redis_mode"] == "sentinel" {
		return nil // a sentinel holds no counts (FailoverOptions connect to them too)
	}
	id := f["run_id"]
	if id == "" {
		return nil
	}
	server := cn.String()
	if a, ok := strings.CutPrefix(server, "Redis<"); ok {
		server, _, _ = strings.Cut(a, " ")
	}
	w.mu.Lock()
	was, seen := w.runIDs[server]
	if w.runIDs == nil {
		w.runIDs = make(map[string]string)
	}
	w.runIDs[server] = id
	fresh := seen && was != id
	if fresh {
		w.n.Add(1) // before the connection carries anything
	}
	w.mu.Unlock()
	if !fresh || w.OnRestart == nil {
		return nil
	}
	up, _ := strconv.ParseInt(f["uptime_in_seconds"], 10, 64)
	r := Restart{Server: server, Was: was, Now: id, Uptime: time.Duration(up) * time.Second}
	if p, err := cn.Info(ctx, "persistence").Result(); err == nil {
		r.AppendOnly = infoFields(p)["aof_enabled"] == "1"
	}
	w.OnRestart(r)
	return nil
}

// infoFields reads INFO's "name:value" lines.
func infoFields(info string) map[string]string {
	f := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			f[k] = v
		}
	}
	return f
}
