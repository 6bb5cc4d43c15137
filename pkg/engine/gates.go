package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/throttlekit/throttlekit/pkg/adaptive"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/policy"
)

// DefaultMessageTimeout is Envoy's default ext_proc message_timeout: a
// gate's queue timeout must stay below it, or Envoy gives up on the call
// while the request still waits.
const DefaultMessageTimeout = 200 * time.Millisecond

// gateRule is one compiled concurrency gate.
type gateRule struct {
	spec     *policy.Gate
	gate     *adaptive.Gate
	run      *nodeRun // a distributed gate's node; nil for a local gate
	identity string
	auth     []string // Authority split on '*', nil when the gate matches any authority
}

// ChooseGate returns the first gate (in policy order) whose match the
// request's authority, path and headers satisfy. header returns a request
// header's value by lower-case name, and whether it is present.
func (e *Engine) ChooseGate(authority, path string, header func(name string) (string, bool)) (GateChoice, bool) {
	for _, g := range e.cur.Load().gates {
		m := &g.spec.Match
		if m.PathPrefix != "" && !strings.HasPrefix(path, m.PathPrefix) {
			continue
		}
		if g.auth != nil && !globParts(g.auth, authority) {
			continue
		}
		if h := m.Header; h != nil {
			v, ok := header(h.Name)
			if !ok || (h.Value != "" && v != h.Value) {
				continue
			}
		}
		c := GateChoice{Name: g.spec.Name, Gate: g.gate, Status: g.spec.Reject.Status, RetryAfter: g.spec.Reject.RetryAfter}
		if g.run != nil {
			c.Node = g.run.node
		}
		return c, true
	}
	return GateChoice{}, false
}

// GateSnapshots reads every gate of the policy in use.
func (e *Engine) GateSnapshots() []adaptive.Snapshot {
	gs := e.cur.Load().gates
	out := make([]adaptive.Snapshot, len(gs))
	for i, g := range gs {
		out[i] = g.gate.Snapshot()
	}
	return out
}

// NodeStat is a distributed gate's node, read for metrics.
type NodeStat struct {
	Gate string
	distributed.Stats
}

// NodeStats reads the node of every distributed gate in use at now.
func (e *Engine) NodeStats(now time.Time) []NodeStat {
	var out []NodeStat
	for _, g := range e.cur.Load().gates {
		if g.run != nil {
			out = append(out, NodeStat{Gate: g.spec.Name, Stats: g.run.node.Stats(now)})
		}
	}
	return out
}

// compileGates builds the set's gates, keeping the gate (and its learned
// limit) of every gate whose definition is unchanged.
func (e *Engine) compileGates(set *policy.Set, prev *compiled, build bool) ([]*gateRule, policy.Errors) {
	old := map[string]*gateRule{}
	if prev != nil {
		for _, g := range prev.gates {
			old[g.identity] = g
		}
	}
	var out []*gateRule
	var errs policy.Errors
	timeout := e.opts.MessageTimeout
	if timeout == 0 {
		timeout = DefaultMessageTimeout
	}
	for _, spec := range set.Gates {
		g := &gateRule{spec: spec, identity: gateIdentity(spec)}
		if spec.Match.Authority != "" {
			g.auth = strings.Split(spec.Match.Authority, "*")
		}
		if spec.Queue.Max > 0 && spec.Queue.Timeout >= timeout {
			errs = append(errs, &policy.Error{Pos: spec.Pos, Field: cmp.Or(spec.Field, "concurrency") + ".queue.timeout", Msg: fmt.Sprintf(
				"queue timeout %v would outlast Envoy's ext_proc message_timeout (%v): lower it, or raise message_timeout in Envoy and --extproc-message-timeout here", spec.Queue.Timeout, timeout)})
			continue
		}
		ctl, err := newController(spec)
		if err != nil {
			errs = append(errs, err...)
			continue
		}
		if !build {
			continue
		}
		if spec.Distributed != nil && e.opts.Distributed == nil {
			errs = append(errs, &policy.Error{Pos: spec.Pos, Field: cmp.Or(spec.Field, "concurrency") + ".distributed", Msg: fmt.Sprintf(
				"gate %q is distributed, but this process has no coordinator for it: run serve with --redis-url (coordinator: redis) or --postgres-url (coordinator: postgres)", spec.Name)})
			continue
		}
		if was := old[g.identity]; was != nil {
			g.gate, g.run = was.gate, was.run
		} else {
			gate, err := adaptive.NewGate(adaptive.GateConfig{
				Name: spec.Name, Controller: ctl, MaxQueue: spec.Queue.Max, QueueTimeout: spec.Queue.Timeout, LIFO: spec.Queue.LIFO, Clock: e.opts.Clock,
			})
			if err != nil {
				errs = append(errs, &policy.Error{Pos: spec.Pos, Field: cmp.Or(spec.Field, "concurrency"), Msg: err.Error()})
				continue
			}
			g.gate = gate
			if spec.Distributed != nil {
				node, err := e.opts.Distributed(spec, gate)
				if err != nil {
					errs = append(errs, &policy.Error{Pos: spec.Pos, Field: cmp.Or(spec.Field, "concurrency") + ".distributed", Msg: err.Error()})
					continue
				}
				g.run = &nodeRun{name: spec.Name, node: node}
			}
		}
		out = append(out, g)
	}
	return out, errs
}

// gateIdentity is everything a gate is built from: a gate whose identity is
// unchanged by a reload keeps its learned limit and its queue.
func gateIdentity(g *policy.Gate) string {
	params := make([]string, 0, len(g.Params))
	for k, v := range g.Params {
		params = append(params, k+"="+v.Value)
	}
	slices.Sort(params)
	h := ""
	if g.Match.Header != nil {
		h = g.Match.Header.Name + "=" + g.Match.Header.Value
	}
	dist := ""
	if g.Distributed != nil {
		dist = fmt.Sprintf("%+v", *g.Distributed)
	}
	return fmt.Sprintf("%s|%s|%s|%s|%s|%d|%d|%d|%s|%+v|%s", g.Name, g.Match.Authority, g.Match.PathPrefix, h, g.Controller,
		g.MinLimit, g.MaxLimit, g.InitialLimit, strings.Join(params, ","), g.Queue, dist)
}
