package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/pkg/gale"
)

var _ gale.DemandLedger = (*Store)(nil)

// ledgerScript stands alone: it takes none of the counter scripts' prelude.
var ledgerScript = standalone(ledgerLua)

// LedgerKey returns the name of key's demand ledger: a hash in the
// counter's Redis Cluster slot.
func (s *Store) LedgerKey(key string) string { return s.Key(key) + ":ledger" }

// Announce records member's demand for key in the window of rule's period
// that now falls in (on Redis's clock with Options.ServerTime) and returns
// every member's demand in that window (gale.DemandLedger): one round trip
// of its own, outside the pipelines, bounded by ctx and Options.Timeout.
// Errors are as for ReturnOnce.
func (s *Store) Announce(ctx context.Context, key string, rule gale.Rule, member string, demand int64, now time.Time) ([]gale.Demand, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := gale.CheckAnnounce(rule, member, demand); err != nil {
		return nil, err
	}
	if err := s.checkTime(now); err != nil {
		return nil, err
	}
	select {
	case <-s.closing:
		return nil, ErrClosed
	default:
	}
	var at any = now.UnixMicro()
	if s.serverTime {
		at = "" // the script reads TIME
	}
	keys := []string{s.LedgerKey(key)}
	args := []any{member, demand, int64(rule.Period / time.Microsecond), at, int64(gale.LedgerEarly(rule.Period) / time.Microsecond)}
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := s.evalAlone(rctx, ledgerScript, keys, args...).Slice()
	var out []gale.Demand
	if err == nil {
		out, err = demands(res)
	}
	if err != nil {
		s.failures.Add(1)
		if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) {
			return nil, cerr
		}
		return nil, fmt.Errorf("redisstore: announce %q: %w", key, err)
	}
	return out, nil
}

// evalAlone runs sc on keys in a round trip of its own, outside the
// pipelines (one operation): EVALSHA, and EVAL once when the server has
// not cached the script.
func (s *Store) evalAlone(ctx context.Context, sc script, keys []string, args ...any) *redis.Cmd {
	s.ops.Add(1)
	s.roundTrips.Add(1)
	cmd := s.client.EvalSha(ctx, sc.sha.(string), keys, args...)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		s.roundTrips.Add(1)
		cmd = s.client.Eval(ctx, sc.src.(string), keys, args...)
	}
	return cmd
}

// demands reads ledger.lua's reply: name, demand, past (0 or 1), ...
func demands(res []any) ([]gale.Demand, error) {
	if len(res)%3 != 0 {
		return nil, fmt.Errorf("%w: %d values", ErrMalformedReply, len(res))
	}
	out := make([]gale.Demand, 0, len(res)/3)
	for i := 0; i < len(res); i += 3 {
		name, ok := res[i].(string)
		units, ok2 := res[i+1].(int64)
		past, ok3 := res[i+2].(int64)
		if !ok || !ok2 || !ok3 {
			return nil, fmt.Errorf("%w: %T, %T, %T", ErrMalformedReply, res[i], res[i+1], res[i+2])
		}
		out = append(out, gale.Demand{Member: name, Units: units, Past: past == 1})
	}
	return out, nil
}
