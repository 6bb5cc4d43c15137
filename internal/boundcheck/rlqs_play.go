package boundcheck

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttlekit/throttlekit/internal/rlqsenvoy"
	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/policy"
	"github.com/throttlekit/throttlekit/pkg/rlqsserver"
)

// RLQSTold is what an RLQS run's Envoys were told: every action applied,
// each request's decision, and when each Envoy reported.
type RLQSTold struct {
	Actions []RLQSAction
	// Steps is one entry per schedule step (a request's decision; the
	// other steps' entries are zero but for Version).
	Steps []RLQSDecision
	// Ticks are each Envoy's report ticks.
	Ticks [][]time.Duration
}

// RLQSAction is one bucket action an Envoy applied.
type RLQSAction struct {
	At            time.Duration
	Envoy, Bucket int
	// Version is how many reloads had been made when it was applied: 0 is
	// the schedule's own policy.
	Version int
	// Tokens is a token bucket's max_tokens, TTL its time to live.
	Tokens int64
	TTL    time.Duration
	// Other is "allow_all" or "deny_all" for a blanket rule, "abandon",
	// or "" for a token bucket.
	Other string
}

// RLQSDecision is what a request step's filter decided, and the version
// of the policy in force then.
type RLQSDecision struct {
	Admitted bool
	// Created: the request created its bucket at its Envoy (a first
	// request, or the first after an abandon), decided by
	// no_assignment_behavior.
	Created bool
	Version int
}

// rlqsRun is one RLQS schedule being played.
type rlqsRun struct {
	ctx      context.Context
	sc       RLQSSchedule
	domain   string
	store    gale.Store
	clk      *simClock
	policy   RLQSPolicy // in force; set by the driver only
	sidecars []*rlqsSidecar
	envoys   []*rlqsEnvoy
	retired  []*rlqsSidecar // killed, closed when the run ends

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change the driver waits on
	events  uint64        // counts those changes
	version int
	streams map[uint64]*rlqsStream
	nextID  uint64
	dirty   bool // something may have happened since the last barrier
	told    RLQSTold
	bad     error // a response the checker cannot read
}

// rlqsSidecar is one incarnation of a serving sidecar.
type rlqsSidecar struct {
	index int
	owner *simOwner
	eng   *engine.Engine
	srv   *rlqsserver.Server
	gs    *grpc.Server
	addr  string
	acks  int64 // barrier answers swallowed; guarded by run.mu
}

// rlqsEnvoy is one Envoy's filter.
type rlqsEnvoy struct {
	index   int
	owner   *simOwner
	f       *rlqsenvoy.Filter
	applied int         // responses applied; guarded by run.mu
	latest  *rlqsStream // its newest stream; guarded by run.mu
}

// PlayRLQS plays sc on store (domain names its keys apart from other
// runs'): sc.Servers sidecars on loopback gRPC listeners, one Envoy filter
// per sc.Envoys entry, and a simulated clock the driver moves from one
// step or timer to the next, letting everything each starts settle (store
// calls, reports handled, assignments delivered and applied) before time
// moves on. An error is the run's: a policy refused, a store failure, or
// something that did not settle within testenv.StoreDeadline.
func PlayRLQS(ctx context.Context, sc RLQSSchedule, store gale.Store, domain string) (RLQSTold, error) {
	r := &rlqsRun{ctx: ctx, sc: sc, domain: domain, store: store, policy: sc.Policy,
		changed: make(chan struct{}), streams: map[uint64]*rlqsStream{}}
	r.clk = newSimClock(Start, r.notify)
	r.told.Steps = make([]RLQSDecision, len(sc.Steps))
	r.told.Ticks = make([][]time.Duration, len(sc.Envoys))
	defer r.close()
	for i := range sc.Servers {
		s, err := r.startSidecar(i)
		if err != nil {
			return RLQSTold{}, err
		}
		r.mu.Lock()
		r.sidecars = append(r.sidecars, s)
		r.mu.Unlock()
	}
	for i, srv := range sc.Envoys {
		if srv < 0 || srv >= sc.Servers {
			return RLQSTold{}, fmt.Errorf("envoy %d on server %d of %d", i, srv, sc.Servers)
		}
		e, err := r.newEnvoy(i, srv)
		if err != nil {
			return RLQSTold{}, err
		}
		r.envoys = append(r.envoys, e)
	}
	end := Start.Add(sc.Length)
	for i := 0; ; {
		at := end
		if i < len(sc.Steps) {
			at = Start.Add(sc.Steps[i].At)
		}
		if r.fire(at) { // timers due by the step fire before it
			if err := r.settle(); err != nil {
				return RLQSTold{}, err
			}
			continue
		}
		if i == len(sc.Steps) {
			break
		}
		r.clk.set(at)
		if err := r.step(i); err != nil {
			return RLQSTold{}, fmt.Errorf("step %d (%v): %w", i, sc.Steps[i], err)
		}
		i++
		if r.isDirty() {
			if err := r.settle(); err != nil {
				return RLQSTold{}, err
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bad != nil {
		return RLQSTold{}, r.bad
	}
	return r.told, nil
}

// fire fires the earliest timer due by at, noting an Envoy's tick.
func (r *rlqsRun) fire(at time.Time) bool {
	before := make([]int, len(r.envoys))
	for i, e := range r.envoys {
		before[i] = r.clk.firedFor(e.owner)
	}
	if !r.clk.fireNext(at) {
		return false
	}
	now := r.clk.time().Sub(Start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirty = true
	for i, e := range r.envoys {
		if r.clk.firedFor(e.owner) != before[i] {
			r.told.Ticks[i] = append(r.told.Ticks[i], now)
		}
	}
	return true
}

func (r *rlqsRun) step(i int) error {
	st := r.sc.Steps[i]
	r.mu.Lock()
	r.told.Steps[i].Version = r.version
	r.mu.Unlock()
	switch st.Kind {
	case RLQSRequest:
		if st.Envoy < 0 || st.Envoy >= len(r.envoys) {
			return fmt.Errorf("no envoy %d", st.Envoy)
		}
		ok, created := r.envoys[st.Envoy].f.DecideNew(map[string]string{"tenant": fmt.Sprintf("b%d", st.Bucket)})
		r.mu.Lock()
		r.told.Steps[i].Admitted, r.told.Steps[i].Created = ok, created
		r.mu.Unlock()
	case RLQSReload:
		set, err := r.set(st.Policy)
		if err != nil {
			return err
		}
		for _, s := range r.sidecars {
			if err := s.eng.Load(r.ctx, set); err != nil {
				return err
			}
		}
		r.policy = st.Policy
		r.mu.Lock()
		r.version++
		r.dirty = true
		r.mu.Unlock()
	case RLQSReset:
		if st.Envoy < 0 || st.Envoy >= len(r.envoys) {
			return fmt.Errorf("no envoy %d", st.Envoy)
		}
		r.envoys[st.Envoy].f.ResetStream()
		r.markDirty()
	case RLQSRestart:
		if st.Server < 0 || st.Server >= len(r.sidecars) {
			return fmt.Errorf("no server %d", st.Server)
		}
		old := r.sidecars[st.Server]
		r.clk.kill(old.owner) // a killed process keeps no timer
		old.gs.Stop()         // nor a connection: nothing it does reaches an Envoy
		r.retired = append(r.retired, old)
		s, err := r.startSidecar(st.Server)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.sidecars[st.Server] = s
		r.dirty = true
		r.mu.Unlock()
	}
	return nil
}

func (r *rlqsRun) set(p RLQSPolicy) (*policy.Set, error) {
	d, err := policy.Parse("rlqs.yaml", []byte(p.YAML(r.domain)))
	if err != nil {
		return nil, fmt.Errorf("policy %v: %w", p, err)
	}
	return &policy.Set{Domains: []*policy.Domain{d}}, nil
}

// startSidecar starts sidecar index over the run's store, with the policy
// in force, on a new loopback listener the Envoys' dialer will reach.
func (r *rlqsRun) startSidecar(index int) (*rlqsSidecar, error) {
	s := &rlqsSidecar{index: index, owner: r.clk.owner()}
	eng, err := engine.New(engine.Options{Store: rlqsStore{Store: r.store, r: r}, Clock: s.owner, StoreTimeout: testenv.StoreDeadline})
	if err != nil {
		return nil, err
	}
	s.eng = eng
	fail := func(err error) (*rlqsSidecar, error) {
		_ = eng.Close(context.Background())
		return nil, err
	}
	set, err := r.set(r.policy)
	if err != nil {
		return fail(err)
	}
	if err := eng.Load(r.ctx, set); err != nil {
		return fail(err)
	}
	// The store calls are bounded by the deadline a test does not
	// measure: a loaded machine must not turn a slow call into a refusal
	// the schedule did not draw.
	// Its name in the demand ledger is its index's: a restarted sidecar is
	// the one it was, as serve's node id and address make it.
	if s.srv, err = rlqsserver.New(rlqsserver.Options{Resolver: eng, Clock: s.owner, StoreTimeout: testenv.StoreDeadline, Member: fmt.Sprintf("bcsrv-%d", s.index)}); err != nil {
		return fail(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	s.addr = lis.Addr().String()
	s.gs = grpc.NewServer(grpc.StreamInterceptor(r.serverInterceptor(s)))
	rlqspb.RegisterRateLimitQuotaServiceServer(s.gs, s.srv)
	go func() { _ = s.gs.Serve(lis) }()
	return s, nil
}

// newEnvoy makes Envoy index, whose cluster is sidecar srv: its address
// resolves to whichever incarnation serves it when the Envoy dials.
func (r *rlqsRun) newEnvoy(index, srv int) (*rlqsEnvoy, error) {
	e := &rlqsEnvoy{index: index, owner: r.clk.owner()}
	replacement := rlqsenvoy.ReplaceRatio
	if r.sc.Full {
		replacement = rlqsenvoy.ReplaceFull
	}
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	if r.sc.AllowAll {
		deny = nil // unset: Envoy's default, ALLOW_ALL
	}
	f, err := rlqsenvoy.New(rlqsenvoy.Config{
		Domain:       r.domain,
		Servers:      []string{fmt.Sprintf("passthrough:///bcsrv-%d", srv)},
		NoAssignment: deny, // the configuration docs/rlqs.md recommends, or Envoy's default
		Replacement:  replacement,
		Clock:        e.owner,
		OpenTimeout:  testenv.StoreDeadline,
		DialOptions: []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(r.dial),
			grpc.WithStreamInterceptor(r.clientInterceptor(e)),
		},
		OnResponse: func(at time.Time, _ int, resp *rlqspb.RateLimitQuotaResponse) { r.applied(e, at, resp) },
	})
	if err != nil {
		return nil, err
	}
	e.f = f
	return e, nil
}

// dial connects to the sidecar serving name ("bcsrv-N") now.
func (r *rlqsRun) dial(ctx context.Context, name string) (net.Conn, error) {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "bcsrv-"))
	r.mu.Lock()
	if err != nil || i < 0 || i >= len(r.sidecars) {
		r.mu.Unlock()
		return nil, fmt.Errorf("no sidecar %q", name)
	}
	addr := r.sidecars[i].addr
	r.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// applied records what Envoy e applied at: resp (called with the filter's
// lock held: it must not call the filter).
func (r *rlqsRun) applied(e *rlqsEnvoy, at time.Time, resp *rlqspb.RateLimitQuotaResponse) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.applied++
	for _, a := range resp.GetBucketAction() {
		var b int
		if _, err := fmt.Sscanf(a.GetBucketId().GetBucket()["tenant"], "b%d", &b); err != nil {
			r.bad = cmpErr(r.bad, fmt.Errorf("envoy %d: an action for bucket %v", e.index, a.GetBucketId().GetBucket()))
			continue
		}
		act := RLQSAction{At: at.Sub(Start), Envoy: e.index, Bucket: b, Version: r.version}
		qa := a.GetQuotaAssignmentAction()
		switch {
		case a.GetAbandonAction() != nil:
			act.Other = "abandon"
		case qa.GetRateLimitStrategy().GetTokenBucket() != nil:
			act.Tokens = int64(qa.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens())
			act.TTL = qa.GetAssignmentTimeToLive().AsDuration()
		case qa.GetRateLimitStrategy().GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL:
			act.Other = "allow_all"
		default:
			act.Other = "deny_all"
		}
		r.told.Actions = append(r.told.Actions, act)
	}
	r.changedLocked()
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (r *rlqsRun) notify() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changedLocked()
}

func (r *rlqsRun) changedLocked() {
	r.events++
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *rlqsRun) markDirty() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirty = true
}

func (r *rlqsRun) isDirty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dirty
}

// close ends the run: the Envoys, then every sidecar, each waiting for
// its store calls.
func (r *rlqsRun) close() {
	for _, e := range r.envoys {
		e.f.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.StoreDeadline)
	defer cancel()
	for _, s := range r.allSidecars() {
		r.clk.kill(s.owner)
		s.gs.Stop()
		_ = s.srv.Close(ctx)
		_ = s.eng.Close(ctx)
	}
}

// allSidecars is every incarnation the run has started.
func (r *rlqsRun) allSidecars() []*rlqsSidecar {
	return append(append([]*rlqsSidecar(nil), r.retired...), r.sidecars...)
}
