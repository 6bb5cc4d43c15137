package distributed

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Coordinator runs Beat for a fleet: it holds each gate's records and
// applies one heartbeat at a time to them.
//
// Concurrency: heartbeats of one gate are serialized — each Beat sees the
// records every earlier one left — so the invariants Beat keeps per step
// hold for the fleet. Heartbeats of different gates are independent.
type Coordinator interface {
	// Heartbeat records rep for gate under cfg and returns the node's grant.
	// now is the caller's clock: a coordinator configured to keep its own
	// (the Redis and PostgreSQL ones with ServerTime: Redis's TIME,
	// PostgreSQL's clock_timestamp) ignores it, so every node's lease is on
	// one clock. A malformed report or config is an error wrapping
	// ErrBadReport or from Config.Validate; a duplicate live nodeId one
	// wrapping ErrDuplicateNode; anything else is the backend's failure.
	Heartbeat(ctx context.Context, gate string, rep Report, cfg Config, now time.Time) (Grant, error)
}

// Leaver is a Coordinator a node can leave. Leave removes node's record of
// gate if instance holds it, at once rather than when its lease ends, so
// the other nodes take its share at their next beats; it reports whether
// there was such a record. A node leaves only once it has nothing in
// flight and admits nothing more (Node.Leave): its record reserves nothing
// the node could still use. Another instance's record is left alone.
type Leaver interface {
	Leave(ctx context.Context, gate, node, instance string) (bool, error)
}

// Leave is the records of a gate after node's instance leaves, and whether
// it held a record; recs is not modified.
func Leave(recs []Record, node, instance string) ([]Record, bool) {
	i := slices.IndexFunc(recs, func(r Record) bool { return r.Node == node && r.Instance == instance })
	if i < 0 {
		return recs, false
	}
	return slices.Delete(slices.Clone(recs), i, i+1), true
}

// Memory is a Coordinator in process memory, on the callers' clock: for
// tests and for the gates of one host. The zero value is ready to use.
type Memory struct {
	mu    sync.Mutex
	gates map[string][]Record
}

// NewMemory returns an empty Memory coordinator.
func NewMemory() *Memory { return &Memory{} }

// Heartbeat implements Coordinator.
func (m *Memory) Heartbeat(ctx context.Context, gate string, rep Report, cfg Config, now time.Time) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	recs, g, err := Beat(m.gates[gate], rep, cfg, now.UnixMicro())
	if err != nil {
		return Grant{}, err
	}
	if m.gates == nil {
		m.gates = make(map[string][]Record)
	}
	m.gates[gate] = recs
	return g, nil
}

// Leave implements Leaver.
func (m *Memory) Leave(ctx context.Context, gate, node, instance string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	recs, ok := Leave(m.gates[gate], node, instance)
	if ok {
		m.gates[gate] = recs
	}
	return ok, nil
}

// Records returns a copy of gate's records, sorted by Node.
func (m *Memory) Records(gate string) []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Record(nil), m.gates[gate]...)
}
