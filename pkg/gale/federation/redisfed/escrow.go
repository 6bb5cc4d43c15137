package redisfed

import (
	"context"
	"crypto/sha1"
	_ "embed" // the Lua scripts
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// Defaults for the zero fields of EscrowOptions, and the escrow's grace.
const (
	// DefaultEscrowPrefix starts every escrow key name. It differs from
	// redisstore.DefaultPrefix, so an escrow and a store may share a Redis.
	DefaultEscrowPrefix = "tk:escrow:"
	// EscrowGrace is the least time Redis keeps a dead balance, for a late
	// Release to capture: a balance's key expires its TTL plus
	// max(TTL, EscrowGrace) after the refill that started it.
	EscrowGrace = time.Second
)

// EscrowOptions configure an Escrow. The zero value is the default for every
// field.
type EscrowOptions struct {
	// Prefix starts the name of every Redis key the escrow writes; empty
	// means DefaultEscrowPrefix ("tk:escrow:").
	Prefix string
	// ServerTime makes the scripts read Redis's clock (TIME) instead of the
	// now passed to each call: a balance's deadline is TIME + TTL at the
	// refill, and it is live while TIME is before it. The production
	// setting: every process of the region then agrees on when a balance
	// dies. Default false: the callers' now, which must all be one clock.
	ServerTime bool
	// Timeout bounds each round trip to Redis, whatever the caller's
	// context allows; 0 means redisstore.DefaultTimeout (1s).
	Timeout time.Duration
}

// Escrow is a federation.Escrow on Redis: one hash per key (see the package
// comment), one Lua script per operation. Create it with NewEscrow; the zero
// value is not usable. It is safe for concurrent use by every process of a
// region. It holds no goroutine and needs no Close.
type Escrow struct {
	client     redis.UniversalClient
	prefix     string
	serverTime bool
	timeout    time.Duration
}

var _ federation.Escrow = (*Escrow)(nil)

// NewEscrow returns an Escrow on client. It does no I/O: the scripts are
// cached in Redis on first use. The client stays the caller's.
func NewEscrow(client redis.UniversalClient, opts EscrowOptions) (*Escrow, error) {
	if client == nil {
		return nil, errors.New("redisfed: nil client")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("redisfed: escrow timeout %v < 0", opts.Timeout)
	}
	e := &Escrow{client: client, prefix: opts.Prefix, serverTime: opts.ServerTime, timeout: opts.Timeout}
	if e.prefix == "" {
		e.prefix = DefaultEscrowPrefix
	}
	if e.timeout == 0 {
		e.timeout = redisstore.DefaultTimeout
	}
	return e, nil
}

// Key returns the name of the Redis hash holding key's balance:
// Prefix + "{" + key + "}", as redisstore names a state.
func (e *Escrow) Key(key string) string { return e.prefix + "{" + key + "}" }

// maxMicros bounds the Unix µs a script is given: every integer below it is
// exact in a double.
const maxMicros = 1 << 53

// Take takes between min and max units of key's live balance. A dead
// balance with units is named in Held.Dead for the caller to Release. It
// returns ctx.Err() when ctx ends first (the take may still be applied),
// federation.ErrEscrowArgs, redisstore.ErrTimeRange for a now outside
// 1970..2255, and otherwise an error naming the operation and key, which
// wraps federation.ErrRefused as well when Redis refused this request
// itself (a key holding another type, a malformed balance: refusedReply).
func (e *Escrow) Take(ctx context.Context, key string, min, max int64, now time.Time) (federation.Held, error) {
	if err := ctx.Err(); err != nil {
		return federation.Held{}, err
	}
	if min < 1 || max < min || max > gale.MaxLimit {
		return federation.Held{}, federation.ErrEscrowArgs
	}
	at, err := e.now(now)
	if err != nil {
		return federation.Held{}, err
	}
	r, err := e.run(ctx, &takeScript, "take", key, at, min, max).Int64Slice()
	if err != nil {
		return federation.Held{}, e.failure(ctx, "take", key, err)
	}
	if len(r) != 6 || r[1] < 0 || r[1] > max || r[3] < 0 || r[4] < 0 || r[5] < 0 || r[5] >= maxMicros {
		return federation.Held{}, e.failure(ctx, "take", key, fmt.Errorf("%w: %v", redisstore.ErrMalformedReply, r))
	}
	took := time.UnixMicro(r[5])
	switch r[0] {
	case 0:
		return federation.Held{Now: took}, nil
	case 1:
		return federation.Held{
			Granted: r[1],
			Window:  federation.Window{End: time.UnixMicro(r[2]), TTL: time.Duration(r[3]) * time.Microsecond},
			Balance: r[4],
			Now:     took,
		}, nil
	case 2:
		return federation.Held{Dead: time.UnixMicro(r[2]), Now: took}, nil
	}
	return federation.Held{}, e.failure(ctx, "take", key, fmt.Errorf("%w: %v", redisstore.ErrMalformedReply, r))
}

// Refill adds n units granted in window w to key's balance, as the
// federation.Escrow contract says, and returns the units added. w.End is
// compared at microsecond resolution, and the deadline is w.Since (now when
// zero) + w.TTL, both rounded down to the microsecond; a refill dead on
// arrival adds nothing. A balance it starts expires from Redis
// w.TTL + max(w.TTL, EscrowGrace) later. Errors are as for Take, with
// redisstore.ErrTimeRange also for a w.End or deadline out of range.
//
// Refill is not idempotent: a client retry after a lost reply adds n twice
// (see the package comment's Retries).
func (e *Escrow) Refill(ctx context.Context, key string, n int64, w federation.Window, now time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if n < 1 || n > gale.MaxLimit || w.TTL < 0 || w.End.IsZero() {
		return 0, federation.ErrEscrowArgs
	}
	at, err := e.now(now)
	if err != nil {
		return 0, err
	}
	end, ttl := w.End.UnixMicro(), int64(w.TTL/time.Microsecond)
	// The deadline, since + ttl, must stay below 2^53 too; under ServerTime
	// now is Redis's, below 2^51 until 2041, and ttl below 2^52 suffices.
	limit := int64(maxMicros / 2)
	if us, ok := at.(int64); ok {
		limit = maxMicros - us
	}
	since := any("")
	if !w.Since.IsZero() {
		us := w.Since.UnixMicro()
		if us < 0 || us >= maxMicros/2 {
			return 0, fmt.Errorf("%w: since %v", redisstore.ErrTimeRange, w.Since)
		}
		since, limit = us, min(limit, maxMicros-us)
	}
	if end < 0 || end >= maxMicros || ttl >= limit {
		return 0, fmt.Errorf("%w: window end %v, TTL %v", redisstore.ErrTimeRange, w.End, w.TTL)
	}
	keep := w.TTL + max(w.TTL, EscrowGrace)
	keepMS := int64((keep + time.Millisecond - 1) / time.Millisecond)
	added, err := e.run(ctx, &refillScript, "refill", key, at, n, end, ttl, keepMS, int64(gale.MaxLimit), since).Int64()
	if err != nil {
		return 0, e.failure(ctx, "refill", key, err)
	}
	if added != 0 && added != n {
		return 0, e.failure(ctx, "refill", key, fmt.Errorf("%w: added %d of %d", redisstore.ErrMalformedReply, added, n))
	}
	return added, nil
}

// Release captures and zeroes key's balance of the window ending at
// windowEnd, dead or alive, and returns it; the first release captures it,
// later ones 0. now is unused: a balance is released whether or not it
// lives. Errors are as for Take.
func (e *Escrow) Release(ctx context.Context, key string, windowEnd time.Time, now time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	end := windowEnd.UnixMicro()
	if windowEnd.IsZero() || end < 0 || end >= maxMicros {
		return 0, nil // Refill never stores such a window: no balance of it
	}
	n, err := e.run(ctx, &releaseScript, "release", key, int64(0), end).Int64()
	if err != nil {
		return 0, e.failure(ctx, "release", key, err)
	}
	if n < 0 {
		return 0, e.failure(ctx, "release", key, fmt.Errorf("%w: captured %d", redisstore.ErrMalformedReply, n))
	}
	return n, nil
}

// now is the script's now argument: the caller's Unix µs, or "" for TIME.
func (e *Escrow) now(now time.Time) (any, error) {
	if e.serverTime {
		return "", nil
	}
	us := now.UnixMicro()
	if us < 0 || us >= maxMicros {
		return nil, fmt.Errorf("%w: now %v", redisstore.ErrTimeRange, now)
	}
	return us, nil
}

// run sends script for key with args by EVALSHA, and by EVAL (which caches
// it) after a NOSCRIPT, bounded by ctx and the escrow's timeout. Neither is
// ever sent again by go-redis (redisstore.AtMostOnce): a Refill resent
// after a lost reply would add its units twice.
func (e *Escrow) run(ctx context.Context, s *script, op, key string, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	cmdArgs := make([]any, 0, 4+len(args))
	cmdArgs = append(cmdArgs, "evalsha", s.sha, 1, e.Key(key))
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	_ = e.client.Process(ctx, redisstore.AtMostOnce(cmd))
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmdArgs[0], cmdArgs[1] = "eval", s.src
		cmd = redis.NewCmd(ctx, cmdArgs...)
		_ = e.client.Process(ctx, redisstore.AtMostOnce(cmd))
	}
	return cmd
}

// failure is the error an operation ended with: ctx.Err() when the
// caller's context ended, else err naming the operation and key, and
// wrapping federation.ErrRefused when Redis refused the request (refusal).
func (e *Escrow) failure(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
		return cerr
	}
	return refusal(fmt.Errorf("redisfed: escrow %s %s: %w", op, quoteKey(key), err))
}

// quoteKey is key quoted for an error message: whole up to 64 bytes, and a
// longer one cut there and its length given, so that one request's long
// key cannot fill a log.
func quoteKey(key string) string {
	const show = 64
	if len(key) <= show {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q… (%d bytes)", key[:show], len(key))
}

// script is a Lua source and its SHA1 digest, the name EVALSHA calls it by.
type script struct{ src, sha string }

func newScript(body string) script {
	src := preludeLua + "\n" + body
	sum := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(sum[:])}
}

// Each script is the prelude (arguments, clock, the balance) followed by
// one operation's body; see scripts/prelude.lua.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/take.lua
	takeLua string
	//go:embed scripts/refill.lua
	refillLua string
	//go:embed scripts/release.lua
	releaseLua string

	takeScript    = newScript(takeLua)
	refillScript  = newScript(refillLua)
	releaseScript = newScript(releaseLua)
)
