package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

// ReturnOnceResult is what ReturnOnce did.
type ReturnOnceResult uint8

const (
	// ReturnApplied: the marker was set, lapsing at the window end, and the
	// credits were given back as Return gives them (which changes nothing
	// when the state has expired or the credits are ≤ 0).
	ReturnApplied ReturnOnceResult = iota + 1
	// ReturnDuplicate: the marker was live, this return having been made
	// before in the window; nothing changed.
	ReturnDuplicate
	// ReturnExpired: the window had ended, and the credits died with it;
	// nothing changed and no marker was set (it would lapse at once).
	ReturnExpired
)

func (r ReturnOnceResult) String() string {
	switch r {
	case ReturnApplied:
		return "applied"
	case ReturnDuplicate:
		return "duplicate"
	case ReturnExpired:
		return "expired"
	}
	return fmt.Sprintf("ReturnOnceResult(%d)", uint8(r))
}

// MaxMarker is the longest ReturnOnce marker, in bytes.
const MaxMarker = 1024

// ErrMarker is returned by ReturnOnce for an empty marker or one longer
// than MaxMarker bytes.
var ErrMarker = fmt.Errorf("redisstore: a return-once marker must be 1..%d bytes", MaxMarker)

// returnOnceScript is return.lua's give behind a marker check, composed
// like the store's own scripts (scripts/return_once.lua).
var returnOnceScript = newScript(returnOnceLua)

// OnceKey returns the name of the marker ReturnOnce sets for (key,
// windowEnd, marker):
//
//	Key(key) + ":once:" + windowEnd in Unix µs + ":" + hex(marker)
//
// It starts with the name of key's state hash, and so shares its Redis
// Cluster slot: Redis hashes the part between the first "{" and the first
// "}" after it, and both braces lie in Key(key), whatever follows. (When
// that part is empty — an empty key, a key starting with "}", or a Prefix
// holding "{}" — Redis hashes the whole name, the marker lands in another
// slot, and Redis Cluster refuses the script with CROSSSLOT: an error,
// never a wrong answer. Standalone Redis is unaffected.)
//
// The marker is hex-encoded so that no marker bytes can forge a name: the
// last "}" of a once-key closes the limit key, and what follows it is
// digits, colons and hex, so the name parses back to one (key, windowEnd,
// marker); and a once-key ends in a hex digit where every state hash ends
// in "}", so none is another key's state.
func (s *Store) OnceKey(key string, windowEnd time.Time, marker string) string {
	b := make([]byte, 0, len(s.prefix)+len(key)+2+len(":once:")+20+1+2*len(marker))
	b = append(b, s.prefix...)
	b = append(b, '{')
	b = append(b, key...)
	b = append(b, '}')
	b = append(b, ":once:"...)
	b = strconv.AppendInt(b, gale.MicrosOf(windowEnd), 10)
	b = append(b, ':')
	b = hex.AppendEncode(b, []byte(marker))
	return string(b)
}

// ReturnOnce gives credits leased in the window ending at windowEnd back to
// key, as Return does, but at most once per (key, windowEnd, marker): one
// script checks a marker key (OnceKey), and sets it — lapsing at the window
// end — when it gives. Credits ≤ 0 give nothing but still set the marker.
// The window's end is judged on the store's clock: now, or Redis's TIME
// under ServerTime. rule must be windowed (the marker lapses at the window
// end; other rules have none).
//
// It is for a give-back that may be retried through a partition — a
// federation coordinator's Reconcile — and costs a round trip of its own,
// outside the pipelines. It returns ctx.Err() when ctx ends first (the
// return may still be applied), ErrClosed after Close, ErrMarker, an error
// wrapping gale.ErrInvalidRule or gale.ErrInvalidCost for bad arguments,
// ErrTimeRange, and otherwise an error naming the operation and key and
// wrapping the Redis or connection error. Each call is bounded by ctx and
// by Options.Timeout.
func (s *Store) ReturnOnce(ctx context.Context, key string, rule gale.Rule, credits int64, windowEnd time.Time, marker string, now time.Time) (ReturnOnceResult, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := gale.CheckReturn(rule, credits); err != nil {
		return 0, err
	}
	if !rule.Windowed() {
		return 0, fmt.Errorf("%w: ReturnOnce needs a windowed rule (its marker lapses at the window end), not %s", gale.ErrInvalidRule, rule)
	}
	if marker == "" || len(marker) > MaxMarker {
		return 0, ErrMarker
	}
	if err := s.checkTime(now); err != nil {
		return 0, err
	}
	end := gale.MicrosOf(windowEnd)
	if end < 0 || end >= maxMicros {
		return 0, fmt.Errorf("%w: window end %v", ErrTimeRange, windowEnd)
	}
	select {
	case <-s.closing:
		return 0, ErrClosed
	default:
	}
	var at any = now.UnixMicro()
	if s.serverTime {
		at = "" // the script reads TIME
	}
	keys := []string{s.Key(key), s.OnceKey(key, windowEnd, marker)}
	args := []any{int64(rule.Algorithm), rule.Limit, int64(rule.Period / time.Microsecond), rule.Burst, int64(rule.Calendar), at, credits, end}

	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := s.evalAlone(rctx, returnOnceScript, keys, args...).Int64()
	if err == nil && (res < int64(ReturnApplied) || res > int64(ReturnExpired)) {
		err = fmt.Errorf("%w: %d", ErrMalformedReply, res)
	}
	if err != nil {
		s.failures.Add(1)
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return 0, cerr
		}
		return 0, fmt.Errorf("redisstore: return-once %q: %w", key, err)
	}
	return ReturnOnceResult(res), nil
}

// Ping sends Redis a PING, bounded by ctx and Options.Timeout, and returns
// nil when it answers: a health check. It returns ErrClosed after Close.
func (s *Store) Ping(ctx context.Context) error {
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Ping(rctx).Err(); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}
