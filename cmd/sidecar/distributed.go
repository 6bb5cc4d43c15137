package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// coordinatorTimeout bounds a distributed gate's heartbeat round trip to
// Redis (the Node bounds each call by its lease TTL too).
const coordinatorTimeout = time.Second

// schemaTimeout bounds serve's creating a PostgreSQL coordinator's tables
// at start. CREATE TABLE IF NOT EXISTS takes catalog locks that the
// sidecars of a fleet starting together wait on in turn, and a busy
// database or machine makes each wait longer: 2 s (startupCheckTimeout)
// failed a sidecar of four started together on a loaded machine. A
// PostgreSQL that is down costs no more than before: the dial is bounded by
// the connection's own timeout and refused at once.
const schemaTimeout = 15 * time.Second

// fleetParts are the coordinators distributed concurrency gates meet in:
// Redis on --redis-url (with --store redis), PostgreSQL on --postgres-url.
// Either is nil when not configured; a gate that names it is refused at
// load, saying which flag it needs.
type fleetParts struct {
	nodeID  string
	redis   distributed.Coordinator // nil, or a *rediscoord.Coordinator (validate: in memory)
	pg      distributed.Coordinator // nil, or a *pgcoord.Coordinator (validate: in memory)
	log     *slog.Logger
	closers []func()
}

// newFleet makes the coordinators c configures. client is the --redis-url
// client, nil with --store memory.
func newFleet(ctx context.Context, c *serveConfig, client redis.UniversalClient, log *slog.Logger) (*fleetParts, error) {
	f := &fleetParts{nodeID: c.nodeID, log: log}
	if client != nil {
		rc, err := rediscoord.New(client, rediscoord.Options{ServerTime: true, Timeout: coordinatorTimeout})
		if err != nil {
			return nil, err
		}
		f.redis = rc
	}
	if c.postgresURL != "" {
		cfg, err := pgxpool.ParseConfig(c.postgresURL)
		if err != nil {
			return nil, fmt.Errorf("--postgres-url %s: %v", Redact(c.postgresURL), redactErr(err, c.postgresURL))
		}
		cfg.ConnConfig.ConnectTimeout = coordinatorTimeout
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("--postgres-url %s: %v", Redact(c.postgresURL), redactErr(err, c.postgresURL))
		}
		f.closers = append(f.closers, pool.Close)
		sctx, cancel := context.WithTimeout(ctx, schemaTimeout)
		pc, err := pgcoord.New(sctx, pool, pgcoord.Options{ServerTime: true})
		cancel()
		if err != nil {
			f.close()
			return nil, fmt.Errorf("--postgres-url %s: %v", Redact(c.postgresURL), redactErr(err, c.postgresURL))
		}
		f.pg = pc
		log.Info("distributed gates: postgres coordinator", "url", Redact(c.postgresURL))
	}
	return f, nil
}

func (f *fleetParts) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
}

// node makes the node of a distributed gate: engine.Options.Distributed.
func (f *fleetParts) node(spec *policy.Gate, gate *adaptive.Gate) (*distributed.Node, error) {
	d := spec.Distributed
	var coord distributed.Coordinator
	switch d.Coordinator {
	case "redis":
		if f.redis == nil {
			return nil, fmt.Errorf("gate %q: coordinator: redis needs serve --store redis --redis-url <the Redis every sidecar of the fleet shares>", spec.Name)
		}
		coord = f.redis
	case "postgres":
		if f.pg == nil {
			return nil, fmt.Errorf("gate %q: coordinator: postgres needs serve --postgres-url <the PostgreSQL every sidecar of the fleet shares>", spec.Name)
		}
		coord = f.pg
	default:
		return nil, fmt.Errorf("gate %q: unknown coordinator %q", spec.Name, d.Coordinator)
	}
	cfg := distributed.NodeConfig{
		Node: f.nodeID, Gate: spec.Name, Coordinator: coord,
		Fleet:     distributed.Config{LeaseTTL: d.LeaseTTL, Handoff: d.AcknowledgedHandoff},
		Heartbeat: d.Heartbeat,
		OnDuplicate: func(err error) {
			f.log.Error("distributed gate: another live sidecar has this --node-id; this one is left out of the fleet until the other's lease ends: give each sidecar its own --node-id", "gate", spec.Name, "err", err)
		},
	}
	switch d.Aggregate {
	case "min":
		cfg.Fleet.Aggregate = distributed.Min
	case "median":
		cfg.Fleet.Aggregate = distributed.Median
	default: // mean, the default: no one sidecar's trough sets the fleet's ceiling
		cfg.Fleet.Aggregate = distributed.Mean
	}
	if d.Split == "demand" {
		cfg.Fleet.Split = distributed.Demand
	}
	if d.Eager {
		cfg.EagerDebounce = d.Heartbeat / 10
	}
	if d.FenceMargin > 0 {
		cfg.SelfFence, cfg.FenceMargin = true, d.FenceMargin
		cfg.OnFenced = func() {
			f.log.Warn("distributed gate: fenced — the coordinator has not renewed this sidecar's lease; admitting nothing until it does", "gate", spec.Name)
		}
	}
	if d.OnOutage == policy.StaticShare {
		cfg.Outage = distributed.StaticShare(d.StaticShare)
	}
	return distributed.NewNode(gate, cfg)
}
