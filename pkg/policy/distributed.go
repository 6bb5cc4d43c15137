package policy

import (
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Distributed makes a gate one of a fleet's: its sidecars share one inferred
// ceiling for the backend through a coordinator instead of each inferring a
// ceiling for all of it.
type Distributed struct {
	// Coordinator is where the fleet's heartbeats meet: redis (the
	// sidecar's --redis-url) or postgres (--postgres-url).
	Coordinator string
	// Heartbeat is how often a sidecar reports (default 1s); LeaseTTL how
	// long its record lives without a report (default 2 × Heartbeat).
	Heartbeat, LeaseTTL time.Duration
	// Aggregate folds the sidecars' local limits: mean (default), min or median.
	Aggregate string
	// Split divides the ceiling: equal (default) or demand.
	Split string
	// AcknowledgedHandoff holds a lowered share reserved until the sidecar
	// acknowledges it: Σ in flight ≤ the ceiling under reporting lag.
	AcknowledgedHandoff bool
	// Eager sends an off-cycle, debounced heartbeat when a share or the load
	// changes in a way the coordinator should hear of at once.
	Eager bool
	// FenceMargin, when > 0, turns on self-fencing: a sidecar admits nothing
	// from FenceMargin before its lease ends on its own clock.
	FenceMargin time.Duration
	// OnOutage is what a sidecar does while the coordinator is unreachable:
	// keep_last_share (default: until the lease ends, then admit nothing) or
	// static_share (StaticShare each).
	OnOutage    string
	StaticShare int
}

// The coordinator outage policies.
const (
	KeepLastShare = "keep_last_share"
	StaticShare   = "static_share"
)

var (
	distributedKeys = []string{"coordinator", "heartbeat", "lease_ttl", "aggregate", "split",
		"acknowledged_handoff", "eager", "self_fence", "on_coordinator_outage", "static_share"}
	distributedLevel = &level{what: "a gate's distributed block", keys: distributedKeys, elsewhere: noElse}
	fenceLevel       = &level{what: "a gate's self_fence", keys: []string{"margin"}, elsewhere: noElse}
)

// distributed reads a gate's distributed block.
func (r *reader) distributed(n *yaml.Node, field string) *Distributed {
	d := &Distributed{Heartbeat: time.Second, Aggregate: "mean", Split: "equal", OnOutage: KeepLastShare}
	if !r.mapping(n, field, "distributed", "coordinator: redis, heartbeat: 1s") {
		return d
	}
	var coordNode, ttlNode, fenceNode, staticNode, outageNode *yaml.Node
	enum := func(p pair, f string, want []string) string {
		s, ok := r.str(p.val, f, p.name)
		if !ok {
			return ""
		}
		s = strings.ToLower(s)
		for _, w := range want {
			if s == w {
				return s
			}
		}
		r.errorf(p.val, f, "%s", enumErr(p.name, s, want))
		return ""
	}
	for _, p := range r.pairs(n, field, 0) {
		f := join(field, p.name)
		if isNull(p.val) {
			continue
		}
		switch p.name {
		case "coordinator":
			d.Coordinator, coordNode = enum(p, f, []string{"redis", "postgres"}), p.val
		case "heartbeat":
			if v, ok := r.duration(p.val, f, p.name); ok {
				d.Heartbeat = v
			}
		case "lease_ttl":
			if v, ok := r.duration(p.val, f, p.name); ok {
				d.LeaseTTL, ttlNode = v, p.val
			}
		case "aggregate":
			if s := enum(p, f, []string{"min", "median", "mean"}); s != "" {
				d.Aggregate = s
			}
		case "split":
			if s := enum(p, f, []string{"equal", "demand"}); s != "" {
				d.Split = s
			}
		case "acknowledged_handoff":
			d.AcknowledgedHandoff, _ = r.boolean(p.val, f, p.name)
		case "eager":
			d.Eager, _ = r.boolean(p.val, f, p.name)
		case "self_fence":
			fenceNode = p.val
			if !r.mapping(p.val, f, "self_fence", "margin: 200ms") {
				continue
			}
			for _, q := range r.pairs(p.val, f, 0) {
				if q.name != "margin" {
					r.unknownKey(q.key, f, fenceLevel)
					continue
				}
				d.FenceMargin, _ = r.duration(q.val, join(f, "margin"), "margin")
			}
		case "on_coordinator_outage":
			if s := enum(p, f, []string{KeepLastShare, StaticShare}); s != "" {
				d.OnOutage, outageNode = s, p.val
			}
		case "static_share":
			v, ok := r.uint32Field(p.val, f, p.name)
			if ok && v == 0 {
				r.errorf(p.val, f, "static_share must be at least 1: the requests in flight each sidecar admits while the coordinator is unreachable")
			}
			d.StaticShare, staticNode = int(v), p.val
		default:
			r.unknownKey(p.key, field, distributedLevel)
		}
	}
	if d.LeaseTTL == 0 {
		d.LeaseTTL = 2 * d.Heartbeat
	}
	switch {
	case coordNode == nil:
		r.errorf(n, join(field, "coordinator"), "distributed needs a coordinator: coordinator: redis (the sidecar's --redis-url) or postgres (its --postgres-url)")
	case ttlNode != nil && d.Heartbeat >= d.LeaseTTL:
		r.errorf(ttlNode, join(field, "lease_ttl"), "lease_ttl %v must be longer than heartbeat %v, or one late heartbeat drops a healthy sidecar from the fleet (leave it out for 2 × heartbeat)", d.LeaseTTL, d.Heartbeat)
	}
	if fenceNode != nil && d.FenceMargin > 0 && d.FenceMargin >= d.LeaseTTL-d.Heartbeat {
		r.errorf(fenceNode, join(join(field, "self_fence"), "margin"), "self_fence margin %v must be shorter than lease_ttl − heartbeat (%v − %v): a healthy sidecar would fence itself before its next heartbeat renews the lease", d.FenceMargin, d.LeaseTTL, d.Heartbeat)
	}
	switch {
	case d.OnOutage == StaticShare && staticNode == nil:
		r.errorf(outageNode, join(field, "static_share"), "on_coordinator_outage: static_share needs static_share: <requests in flight per sidecar> (the backend's capacity divided by the number of sidecars is the safe choice)")
	case d.OnOutage != StaticShare && staticNode != nil:
		r.errorf(staticNode, join(field, "static_share"), "static_share applies only with on_coordinator_outage: static_share")
	}
	return d
}

// distributedNode formats a distributed block, leaving defaults out.
func distributedNode(d *Distributed) mapNode {
	m := newMap(true)
	m.add("coordinator", strNode(d.Coordinator))
	if d.Heartbeat != time.Second {
		m.add("heartbeat", durationNode(d.Heartbeat))
	}
	if d.LeaseTTL != 2*d.Heartbeat {
		m.add("lease_ttl", durationNode(d.LeaseTTL))
	}
	if d.Aggregate != "" && d.Aggregate != "mean" {
		m.add("aggregate", strNode(d.Aggregate))
	}
	if d.Split != "" && d.Split != "equal" {
		m.add("split", strNode(d.Split))
	}
	if d.AcknowledgedHandoff {
		m.add("acknowledged_handoff", boolNode(true))
	}
	if d.Eager {
		m.add("eager", boolNode(true))
	}
	if d.FenceMargin > 0 {
		f := newMap(true)
		f.add("margin", durationNode(d.FenceMargin))
		m.add("self_fence", f.Node)
	}
	if d.OnOutage == StaticShare {
		m.add("on_coordinator_outage", strNode(StaticShare))
		m.add("static_share", intNode(d.StaticShare))
	}
	return m
}
