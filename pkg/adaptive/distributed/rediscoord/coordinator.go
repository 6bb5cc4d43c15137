package rediscoord

import (
	"context"
	_ "embed" // the Lua script
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
)

// Defaults for the zero fields of Options.
const (
	// DefaultPrefix starts every key name: a gate's hash is
	// tk:conc:{<escaped gate>}.
	DefaultPrefix = "tk:conc:"
	// DefaultTimeout bounds a heartbeat's round trip.
	DefaultTimeout = time.Second
)

// MaxCount bounds a report's Local, Inflight and Demand (Report.Validate
// refuses more): up to it every sum and product the script computes is an
// integer below 2^53, exact in Lua's doubles (see the package comment).
const MaxCount = distributed.MaxCount

// exact bounds the integers the script is given: every one below it is
// exact in a double.
const exact = 1 << 53

// ErrTimeRange is returned for a now, or a lease end, outside the instants
// the script computes with exactly: Unix µs in [0, 2^53), 1970 to 2255.
var ErrTimeRange = errors.New("rediscoord: time outside 1970..2255 (Unix µs in [0, 2^53))")

// ErrMalformedRecord is wrapped by the error returned when a gate's hash
// holds a value that is not a record: something other than the script
// wrote it. The heartbeat changes nothing.
var ErrMalformedRecord = errors.New("rediscoord: malformed record")

// ErrMalformedReply is wrapped by the error returned when Redis answers the
// script with something other than what the script returns.
var ErrMalformedReply = errors.New("rediscoord: malformed reply")

// Options configure a Coordinator. The zero value is the default for every
// field.
type Options struct {
	// Prefix starts the name of every Redis key the coordinator writes;
	// empty means DefaultPrefix ("tk:conc:"). It must not hold a brace,
	// which would move the keys' Redis Cluster hash tag into it.
	Prefix string
	// ServerTime makes the script read Redis's clock (TIME) instead of the
	// now passed to each heartbeat, so every node's lease is on one clock:
	// the production setting. Default false, the callers' now, which must
	// then all be one clock (deterministic tests; the differential against
	// distributed.Memory), as redisstore.Options and redisfed.EscrowOptions.
	ServerTime bool
	// Timeout bounds each heartbeat's round trip (EVALSHA, and EVAL after a
	// NOSCRIPT), whatever the caller's context allows; 0 means
	// DefaultTimeout (1s). It bounds the round trip through its context,
	// which go-redis carries to the socket only when the client's
	// ContextTimeoutEnabled is set; otherwise the client's ReadTimeout
	// bounds a read.
	Timeout time.Duration
}

// Coordinator is a distributed.Coordinator on Redis: each gate's records in
// one hash, each heartbeat one Lua script that runs Beat on them (see the
// package comment). Create it with New; the zero value is not usable. It is
// safe for concurrent use by any number of nodes and processes: Redis runs
// one script at a time, so the heartbeats of a gate are serialized. It
// holds no goroutine and needs no Close.
type Coordinator struct {
	client     redis.UniversalClient
	prefix     string
	serverTime bool
	timeout    time.Duration
}

var _ distributed.Coordinator = (*Coordinator)(nil)

// New returns a Coordinator on client. It does no I/O: the script is cached
// in Redis on first use, and again after a NOSCRIPT. The client stays the
// caller's.
func New(client redis.UniversalClient, opts Options) (*Coordinator, error) {
	switch {
	case client == nil:
		return nil, errors.New("rediscoord: nil client")
	case opts.Timeout < 0:
		return nil, fmt.Errorf("rediscoord: timeout %v < 0", opts.Timeout)
	case strings.ContainsAny(opts.Prefix, "{}"):
		return nil, fmt.Errorf("rediscoord: prefix %q holds a brace: it would be the keys' Redis Cluster hash tag", opts.Prefix)
	}
	c := &Coordinator{client: client, prefix: opts.Prefix, serverTime: opts.ServerTime, timeout: opts.Timeout}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	return c, nil
}

// Key returns the name of the Redis hash holding gate's records:
// Prefix + "{" + escaped gate + "}", where the escape writes '%', '{' and
// '}' as %25, %7B and %7D. No two gates share a name, and the hash tag is
// the whole escaped gate, so a gate is one Redis Cluster slot whatever
// bytes it holds.
func (c *Coordinator) Key(gate string) string {
	if !strings.ContainsAny(gate, "%{}") {
		return c.prefix + "{" + gate + "}"
	}
	var b strings.Builder
	b.Grow(len(c.prefix) + len(gate) + 8)
	b.WriteString(c.prefix)
	b.WriteByte('{')
	for i := 0; i < len(gate); i++ {
		switch ch := gate[i]; ch {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte('}')
	return b.String()
}

// Heartbeat records rep for gate under cfg and returns the node's grant, as
// distributed.Beat does, in one script. now is ignored under ServerTime, and
// Grant.Now is then Redis's time. It returns ctx.Err() when ctx ends first
// (the heartbeat may still have been applied: sending the report again is
// answered Stale, with the share recorded); errors wrapping
// distributed.ErrBadReport (Report.Validate, or a count above MaxCount),
// Config.Validate's, ErrTimeRange, distributed.ErrDuplicateNode and
// ErrMalformedRecord, which change nothing; and otherwise an error naming
// the gate.
func (c *Coordinator) Heartbeat(ctx context.Context, gate string, rep distributed.Report, cfg distributed.Config, now time.Time) (distributed.Grant, error) {
	if err := ctx.Err(); err != nil {
		return distributed.Grant{}, err
	}
	if err := rep.Validate(); err != nil {
		return distributed.Grant{}, err
	}
	if err := cfg.Validate(); err != nil {
		return distributed.Grant{}, err
	}
	ttl := cfg.LeaseTTL.Microseconds() // as Beat rounds it
	var at any = ""                    // the script reads TIME
	if c.serverTime {
		// TIME is below 2^52 until 2112.
		if ttl >= exact/2 {
			return distributed.Grant{}, fmt.Errorf("%w: lease TTL %v", ErrTimeRange, cfg.LeaseTTL)
		}
	} else {
		us := now.UnixMicro()
		if us < 0 || us >= exact || ttl >= exact-us {
			return distributed.Grant{}, fmt.Errorf("%w: now %v, lease TTL %v", ErrTimeRange, now, cfg.LeaseTTL)
		}
		at = us
	}

	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reply, err := heartbeat.Run(rctx, c.client, []string{c.Key(gate)},
		at, rep.Node, rep.Instance, rep.Seq, rep.Local, rep.Inflight, rep.Demand, rep.AppliedGen, ttl,
		int(cfg.Aggregate), int(cfg.Split), cfg.Handoff).Slice()
	if err != nil {
		return distributed.Grant{}, c.failure(ctx, gate, err)
	}
	return grantOf(gate, rep, reply)
}

// grantOf decodes the script's reply to rep.
func grantOf(gate string, rep distributed.Report, reply []any) (distributed.Grant, error) {
	malformed := func() (distributed.Grant, error) {
		return distributed.Grant{}, fmt.Errorf("rediscoord: heartbeat of gate %q: %w: %v", gate, ErrMalformedReply, reply)
	}
	if len(reply) == 2 {
		s, ok := reply[1].(string)
		switch {
		case !ok:
			return malformed()
		case reply[0] == int64(3):
			return distributed.Grant{}, fmt.Errorf("%w: %q is live as instance %q, reported by instance %q",
				distributed.ErrDuplicateNode, rep.Node, s, rep.Instance)
		case reply[0] == int64(4):
			return distributed.Grant{}, fmt.Errorf("%w: gate %q, node %q: not written by this package's script", ErrMalformedRecord, gate, s)
		}
		return malformed()
	}
	var n [7]int64
	if len(reply) != len(n) {
		return malformed()
	}
	for i, v := range reply {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return malformed()
		}
		n[i] = x
	}
	status := distributed.Granted
	switch {
	case n[0] == 2:
		status = distributed.Stale
	case n[0] != 1, n[2] < 1, n[4] < 1, n[1] > n[3]:
		return malformed()
	}
	return distributed.Grant{Status: status, Share: int(n[1]), Gen: uint64(n[2]), Global: int(n[3]), Live: int(n[4]),
		ExpiresAt: n[5], Now: n[6]}, nil
}

// Records returns gate's records, sorted by Node, expired ones not yet
// evicted included (as distributed.Memory.Records): for inspection and
// tests. It returns an error wrapping ErrMalformedRecord for a value that
// does not decode.
func (c *Coordinator) Records(ctx context.Context, gate string) ([]distributed.Record, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	h, err := c.client.HGetAll(rctx, c.Key(gate)).Result()
	if err != nil {
		return nil, c.failure(ctx, gate, err)
	}
	recs := make([]distributed.Record, 0, len(h))
	for node, v := range h {
		r, err := decodeRecord(node, v)
		if err != nil {
			return nil, fmt.Errorf("gate %q: %w", gate, err)
		}
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b distributed.Record) int { return strings.Compare(a.Node, b.Node) })
	return recs, nil
}

// Leave implements distributed.Leaver: one script removes node's record of
// gate if instance holds it.
func (c *Coordinator) Leave(ctx context.Context, gate, node, instance string) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	n, err := leave.Run(rctx, c.client, []string{c.Key(gate)}, node, instance).Int()
	if err != nil {
		return false, c.failure(ctx, gate, err)
	}
	return n == 1, nil
}

// failure is the error a call ended with: ctx.Err() when the caller's
// context ended, else err naming the gate.
func (c *Coordinator) failure(ctx context.Context, gate string, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return cerr
	}
	return fmt.Errorf("rediscoord: gate %q: %w", gate, err)
}

//go:embed scripts/heartbeat.lua
var heartbeatLua string

//go:embed scripts/leave.lua
var leaveLua string

var leave = redis.NewScript(leaveLua)

// heartbeat runs by EVALSHA, and by EVAL (which caches it) after a
// NOSCRIPT: after a SCRIPT FLUSH, a restart or a failover.
var heartbeat = redis.NewScript(heartbeatLua)
