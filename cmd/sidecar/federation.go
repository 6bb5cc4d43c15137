package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/telemetry"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/pgcoord"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// federationScheme returns the kind of coordinator --federation-url names:
// "redis" or "postgres".
func federationScheme(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("--federation-url is not a valid URL (not shown: it may hold a password); want redis://host:6379/0 or postgres://user@host:5432/db")
	}
	switch u.Scheme {
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		return "redis", nil
	case "postgres", "postgresql":
		return "postgres", nil
	}
	return "", fmt.Errorf("--federation-url %s: scheme %q: want redis://, rediss://, redis+cluster:// or postgres://", Redact(raw), u.Scheme)
}

// federationParts is this process's membership of a federation: the
// coordinator every region shares, the region's escrow (on --redis-url)
// and the regions made for federated rules, by rule.
type federationParts struct {
	region   string
	coord    federation.Coordinator
	escrow   federation.Escrow // nil with --store memory
	fallback gale.Store        // the regional budget's store (regional_only)
	timeout  time.Duration
	probe    time.Duration
	closers  []func()

	// health is the coordinator connection's, shared by every rule.
	health *federation.Health

	mu sync.Mutex
	// states is kept across reloads, by counter (FederatedRule.Counter): a
	// reload that renames, moves or re-figures a rule keeps its pending
	// reconciles and regional-budget records, as it keeps its counters.
	states  map[string]*federation.RuleState
	regions map[engine.RuleRef]*federation.Region // the newest per rule
	names   map[string]engine.RuleRef             // each counter's newest rule
	owners  map[engine.RuleRef]string             // the counter of each rule in regions
}

// newFederationParts is c's federation before any coordinator or escrow
// is attached.
func newFederationParts(c *serveConfig) *federationParts {
	return &federationParts{region: c.region, timeout: c.federationTimeout, probe: c.federationProbe,
		health: federation.NewHealth(c.federationProbe),
		states: map[string]*federation.RuleState{}, regions: map[engine.RuleRef]*federation.Region{},
		names: map[string]engine.RuleRef{}, owners: map[engine.RuleRef]string{}}
}

// newFederation joins the federation c describes, or returns nil when c
// names none. regional is the --redis-url client (nil with --store memory)
// and rs the store on it.
func newFederation(ctx context.Context, c *serveConfig, regional redis.UniversalClient, rs *redisstore.Store, log *slog.Logger) (*federationParts, error) {
	if c.region == "" {
		return nil, nil
	}
	f := newFederationParts(c)
	f.health.Notify(func(down bool, err error) {
		if down {
			log.Warn("federation: the coordinator does not answer: federated rules answer by their outage mode until a probe finds it", "url", Redact(c.federationURL), "err", redactErr(err, c.federationURL), "probe_after", c.federationProbe.String())
			return
		}
		log.Info("federation: the coordinator answers again", "url", Redact(c.federationURL))
	})
	kind, err := federationScheme(c.federationURL)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "redis":
		client, err := redisClientFor("--federation-url", c.federationURL, c.federationTimeout, nil, nil)
		if err != nil {
			return nil, err
		}
		f.closers = append(f.closers, func() { _ = client.Close() })
		coord, err := redisfed.NewCoordinator(client, redisstore.Options{Prefix: "tk:fed:", ServerTime: true, Timeout: c.federationTimeout})
		if err != nil {
			f.close()
			return nil, err
		}
		f.closers = append(f.closers, func() { _ = coord.Close() })
		f.coord = coord
		warnVolatileCoordinator(ctx, client, c.federationURL, log)
	case "postgres":
		cfg, err := pgxpool.ParseConfig(c.federationURL)
		if err != nil {
			return nil, fmt.Errorf("--federation-url %s: %v", Redact(c.federationURL), redactErr(err, c.federationURL))
		}
		cfg.ConnConfig.ConnectTimeout = max(c.federationTimeout, time.Second)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("--federation-url %s: %v", Redact(c.federationURL), redactErr(err, c.federationURL))
		}
		f.closers = append(f.closers, pool.Close)
		sctx, cancel := context.WithTimeout(ctx, schemaTimeout)
		coord, err := pgcoord.New(sctx, pool, pgcoord.Options{ServerTime: true})
		cancel()
		if err != nil {
			f.close()
			return nil, fmt.Errorf("--federation-url %s: %v", Redact(c.federationURL), redactErr(err, c.federationURL))
		}
		f.coord = coord
	}
	if regional != nil {
		e, err := redisfed.NewEscrow(regional, redisfed.EscrowOptions{ServerTime: true, Timeout: c.federationTimeout})
		if err != nil {
			f.close()
			return nil, err
		}
		f.escrow, f.fallback = e, rs
	}
	hctx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	if err := f.coord.Healthy(hctx); err != nil {
		// An outage, not a configuration error: federated rules answer by
		// their outage mode until the coordinator answers.
		log.Warn("federation: the coordinator does not answer yet; federated rules answer by their outage mode until it does", "url", Redact(c.federationURL), "err", redactErr(err, c.federationURL))
	}
	escrow := "none (--store memory: this process is its region's only one)"
	if f.escrow != nil {
		escrow = "redis (--redis-url)"
	}
	log.Info("federation: joined", "region", c.region, "coordinator", Redact(c.federationURL), "escrow", escrow)
	return f, nil
}

func (f *federationParts) close() {
	f.mu.Lock()
	states := f.states
	f.states = nil
	f.mu.Unlock()
	for _, s := range states {
		s.Close() // waits for a retry under way, before the clients close
	}
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
}

// rule gives a federated rule its region: the engine's Options.Federation.
func (f *federationParts) rule(fr engine.FederatedRule) (engine.Federated, error) {
	batch := int64(fr.Federation.Batch)
	if batch == 0 {
		batch = max(1, fr.Rule.Capacity()/10)
	}
	cfg := federation.RegionConfig{
		Name: f.region, Coordinator: f.coord, Health: f.health, Escrow: f.escrow, Batch: batch,
		ProbeAfter: f.probe, Timeout: f.timeout,
	}
	if fr.Federation.Outage == policy.RegionalOnly {
		if f.escrow == nil {
			return engine.Federated{}, errors.New("outage: regional_only needs the region's own Redis to count its regional budget, shared by the region's processes: run with --store redis (or use outage: fail_closed)")
		}
		cfg.Outage, cfg.Fallback, cfg.RegionalLimit = federation.RegionalOnly, f.fallback, int64(fr.Federation.RegionalLimit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.states == nil {
		return engine.Federated{}, errors.New("federation: closed")
	}
	if f.states[fr.Counter] == nil {
		f.states[fr.Counter] = federation.NewRuleState(nil)
	}
	cfg.State = f.states[fr.Counter]
	r, err := federation.NewRegion(cfg)
	if err != nil {
		return engine.Federated{}, err
	}
	if was, ok := f.names[fr.Counter]; ok && was != fr.Ref && f.owners[was] == fr.Counter {
		// Renamed: its counters report under the new name only (unless
		// another rule took the old name meanwhile).
		delete(f.regions, was)
		delete(f.owners, was)
	}
	f.names[fr.Counter], f.owners[fr.Ref] = fr.Ref, fr.Counter
	f.regions[fr.Ref] = r
	// With an escrow a process leases a quarter of the region's batch from
	// it, so the region's other processes find the rest there.
	l1 := batch
	if f.escrow != nil {
		l1 = max(1, batch/4)
	}
	return engine.Federated{Store: r, Batch: l1, Timeout: f.timeout}, nil
}

// snapshot returns every federated rule's counters, for the collector
// (internal/telemetry).
func (f *federationParts) snapshot() []telemetry.FederatedRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]telemetry.FederatedRule, 0, len(f.regions))
	for ref, r := range f.regions {
		out = append(out, telemetry.FederatedRule{Ref: ref, Outage: r.Outage(), Stats: r.Stats()})
	}
	return out
}

// warnVolatileCoordinator warns when the coordinator's Redis keeps no
// append-only file: restarted, it forgets what it granted in the window in
// place, and the window admits that again (README: Federation). A Redis
// that refuses CONFIG (a managed one, an ACL) is not warned about.
func warnVolatileCoordinator(ctx context.Context, client redis.UniversalClient, url string, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, startupCheckTimeout)
	defer cancel()
	got, err := client.ConfigGet(cctx, "appendonly").Result()
	if err != nil {
		log.Debug("federation: cannot read the coordinator's appendonly setting", "url", Redact(url), "err", redactErr(err, url))
		return
	}
	if v, ok := got["appendonly"]; ok && v != "yes" {
		log.Warn("federation: the coordinator's Redis runs without appendonly: restarted, it forgets what it granted in the window in place and that window admits it again; run it with appendonly yes and appendfsync always", "url", Redact(url))
	}
}
