package main

import (
	"log/slog"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// newRestartWatch is the watch serve puts on the --redis-url client: it
// logs each new server it finds, once, with what that costs, and once if
// the server refuses INFO. throttlekit_store_restarts_total counts them.
func newRestartWatch(log *slog.Logger) *redisstore.Watch {
	return &redisstore.Watch{
		OnRestart: func(r redisstore.Restart) {
			lost := "it keeps no append-only file: the counts it held are lost (all of them, unless an RDB snapshot brought older ones back)"
			if r.AppendOnly {
				lost = "it came back from its append-only file: with appendfsync always nothing is lost, with everysec up to its last second of counts"
			}
			log.Warn("store restarted: the Redis server behind --redis-url is a new one (restarted, or a replica promoted); "+lost+
				"; windows in place may admit again what it forgot, up to their limit, except keys this sidecar was denied, which stay denied here until their windows end (docs/faults.md: Store restarts)",
				"server", r.Server, "run_id", r.Now, "was", r.Was, "uptime", r.Uptime.String(), "appendonly", r.AppendOnly)
		},
		OnBlind: func(err error) {
			log.Warn("store restarts go unseen: Redis refuses INFO to the --redis-url user (grant +info in its ACL)", "err", err)
		},
	}
}

// forgetfulStore is an instrumentedStore over a store that can tell when it
// forgot (the Redis store): it stays gale.Forgetful, so strict limiters
// keep their denials across a restart.
type forgetfulStore struct {
	*instrumentedStore
	f gale.Forgetful
}

func (s forgetfulStore) Forgot() uint64 { return s.f.Forgot() }
