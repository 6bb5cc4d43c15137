// Package engine compiles a rate-limit policy into limiters and answers
// requests with it: descriptor matching with envoyproxy/ratelimit's
// semantics, counter keys no descriptor value can collide and no rename,
// reorder or change of figures resets (key.go), several limits per
// descriptor (a request one of them denies consumes nothing from the others),
// shadow and quota modes, replaces, and an atomic swap of the whole policy on
// reload. It knows nothing of gRPC, protobuf or Prometheus: the adapter turns
// its Response into protobuf, and a collector reads its counters.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/clock"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// Options configure an Engine. Store is required.
type Options struct {
	// Store is the shared tier every limiter asks.
	Store gale.Store
	// QuotaStore is the store the Rate Limit Quota Service leases from and
	// gives back to (ResolveQuota's leasers), when not Store: the same
	// counters, reached on no request's path, so a round trip may take
	// longer than a request's. nil means Store.
	QuotaStore gale.Store
	// Shadow puts every rule in shadow mode: counted, never enforced.
	Shadow bool
	// UpstreamHits counts every rule's hits as envoyproxy/ratelimit's
	// statistics do (RuleSnapshot.Upstream); off, they stay 0 and a
	// decision pays none of their atomic adds.
	UpstreamHits bool
	// StoreTimeout bounds each request's store calls together (one
	// deadline per request) and each alone (0: gale's default, 50ms).
	StoreTimeout time.Duration
	// MaxKeys bounds each limiter's L1 (0: gale's default).
	MaxKeys int
	// Clock drives the limiters' background timers (nil: the real clock).
	Clock clock.Clock
	// Logger receives reload and close problems (nil: discard).
	Logger *slog.Logger
	// Federation gives a federated rule (mode: federated) the store it
	// leases through, its region's; nil refuses federated rules at load.
	Federation func(FederatedRule) (Federated, error)
	// Distributed makes the node of a distributed gate (a gate with a
	// distributed block) around the gate the engine built; nil refuses
	// distributed gates at load. The engine runs the node's heartbeats
	// (Node.Run) while the gate is in use. When a reload changes the gate,
	// the new node takes the old one over (Node.TakeOver: one record at
	// the coordinator, no pause in admissions); when it drops the gate, the
	// node drains and leaves its fleet (nodes.go); so does every node when
	// the engine closes.
	Distributed func(spec *policy.Gate, gate *adaptive.Gate) (*distributed.Node, error)
	// MessageTimeout is Envoy's ext_proc message_timeout: gates' queue
	// timeouts must stay below it (0: DefaultMessageTimeout, Envoy's 200ms).
	MessageTimeout time.Duration
}

// FederatedRule is a federated rule, for Options.Federation.
type FederatedRule struct {
	Ref RuleRef
	// Counter is the rule's counter identity (domain, descriptor path,
	// period, algorithm): the same for every policy in which the rule
	// counts the same requests, whatever its name, place or figures, so
	// what a process carries for the rule across reloads can be kept by it.
	Counter    string
	Rule       gale.Rule
	Federation policy.Federation
}

// Federated is how a federated rule's limiter leases.
type Federated struct {
	// Store is the region's store (a federation.Region).
	Store gale.Store
	// Batch is a process's lease from it; 0 for gale's default.
	Batch int64
	// Timeout bounds each of its calls; 0 for the engine's StoreTimeout.
	Timeout time.Duration
}

// Engine answers rate-limit requests from the policy last loaded. It is safe
// for concurrent use; Load swaps the policy atomically while requests run.
type Engine struct {
	opts  Options
	store gale.Store
	bg    context.Context
	log   *slog.Logger

	cur atomic.Pointer[compiled]
	// quotaGen is QuotaGeneration: added to after each swap of cur and at
	// Close, never before, so a generation read before a resolution is
	// never newer than the policy the resolution used.
	quotaGen  atomic.Uint64
	loadMu    sync.Mutex // serialises Load and Close
	closed    bool       // guarded by loadMu
	handover  handover   // retired policies' limiters, closed once unused
	drains    drains     // dropped distributed gates' nodes, left once unused
	overrides overrides

	statsMu sync.Mutex
	stats   map[RuleRef]*ruleStats // survive reloads, so counters never go back
	unknown unknownDomains
}

// New returns an Engine with an empty policy: every request is OK until Load.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("engine: nil store")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{opts: opts, store: opts.Store, bg: context.Background(), log: log, stats: map[RuleRef]*ruleStats{}}
	e.drains.ctx, e.drains.cancel = context.WithCancel(context.Background())
	e.cur.Store(e.newCompiled(&policy.Set{}, 0))
	return e, nil
}

// Check compiles set without loading it: the errors Load would report, with
// file, line and field.
func (e *Engine) Check(set *policy.Set) error {
	_, _, err := e.compile(set, nil, false)
	return err
}

// Load compiles set and swaps it in. On error the current policy stays in
// place and the error lists every problem (policy.Errors). Limiters of rules
// that are unchanged keep their state; those of rules that changed or
// vanished are closed, returning their leased credits, once no request uses
// them: before Load returns when no request is in flight, else when the
// last request that could use them has finished (see handover.go). A
// distributed gate that changed keeps its place in its fleet (the new
// node takes the old one over); one that vanished leaves its fleet once
// its requests have ended, before Load returns when none is in flight
// (nodes.go).
func (e *Engine) Load(ctx context.Context, set *policy.Set) error {
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	if e.closed {
		return errEngineClosed
	}
	prev := e.cur.Load()
	c, retired, err := e.compile(set, prev, true)
	if err != nil {
		return err
	}
	taken := e.takeOver(ctx, c, prev)
	e.cur.Store(c)
	e.quotaGen.Add(1)
	startNodes(c)
	e.retireNodes(ctx, c, prev, taken)
	limiters := make([]*gale.Limiter, 0, len(retired))
	for _, l := range retired {
		limiters = append(limiters, l)
	}
	if err := e.retire(ctx, prev, limiters); err != nil {
		e.log.Warn("returning leased credits of replaced rules failed", "err", err)
	}
	return nil
}

// Policy returns the policy set in use.
func (e *Engine) Policy() *policy.Set { return e.cur.Load().set }

// Close closes every limiter, returning leased credits, and takes every
// distributed gate's node out of its fleet (but those with requests still
// in flight: their leases end on their own). The engine answers no request
// afterwards; requests still in flight may fail with gale.ErrClosed.
func (e *Engine) Close(ctx context.Context) error {
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	c := e.cur.Load()
	c.users.Add(-retiredBias) // acquire fails from now on
	e.quotaGen.Add(1)         // ResolveQuota answers an error from now on
	var errs []error
	if err := e.leaveNodes(ctx, c); err != nil {
		errs = append(errs, err)
	}
	if err := closeLimiters(ctx, e.handover.closeAll()); err != nil {
		errs = append(errs, err)
	}
	for _, r := range c.rules {
		if r.limiter != nil {
			if err := r.limiter.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s/%s: %w", r.ref.Domain, r.ref.Name, err))
			}
		}
	}
	e.overrides.close()
	return errors.Join(errs...)
}
