package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
)

// TestFixedCheckMatchesComposed holds check_fixed.lua to the composed check
// script it stands in for: on random schedules of fixed-window checks —
// windows crossed, clocks that step back, costs above what is left and
// above the limit, state written by leases and returns in between, state
// that has expired, the same key twice in one call — a call of the
// fixed-window script carrying several checks returns what the composed
// script returns for each of them in turn, on twin keys, and leaves the
// same hashes and the same expiries.
func TestFixedCheckMatchesComposed(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client()
	// A day ahead of the real time: Redis expires keys by its own clock, so
	// no state the schedule writes expires under it.
	base := time.Now().UTC().Add(48 * time.Hour).Truncate(24 * time.Hour).UnixMicro()
	composed, lean, lease, give := scripts[opCheck], scripts[opCheckFixed], scripts[opLease], scripts[opReturn]
	run := func(sc script, keys []string, args ...any) ([]int64, error) {
		return redis.NewScript(sc.src.(string)).Run(ctx, c, keys, args...).Int64Slice()
	}
	const keysPerSeed = 3
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		limit := int64(1 + rng.IntN(8))
		period := []int64{1_000_000, 7_000_000, 60_000_000}[rng.IntN(3)]
		now := base + rng.Int64N(3*period)
		var twinA, twinB [keysPerSeed]string
		for k := range keysPerSeed {
			twinA[k], twinB[k] = fmt.Sprintf("composed/%d/%d", seed, k), fmt.Sprintf("lean/%d/%d", seed, k)
		}
		var lastEnd int64
		for step := range 60 {
			switch r := rng.IntN(10); {
			case r < 5:
				now += rng.Int64N(period / 2)
			case r < 6:
				now -= rng.Int64N(period) // a caller whose clock is behind
			case r < 7:
				now += period + rng.Int64N(2*period) // windows pass
			}
			args := []any{int64(gale.FixedWindow), limit, period, 0, 0, now}
			switch r := rng.IntN(10); {
			case r < 7: // one call of 1–4 checks, keys drawn with repeats
				var keysB []string
				var argsB []any
				var want []int64
				for range 1 + rng.IntN(4) {
					k, cost := rng.IntN(keysPerSeed), 1+rng.Int64N(limit+1)
					reply, err := run(composed, []string{twinA[k]}, append(args, cost)...)
					if err != nil {
						t.Fatalf("seed %d step %d: composed check: %v", seed, step, err)
					}
					want = append(want, reply...)
					keysB = append(keysB, twinB[k])
					argsB = append(argsB, limit, period, now, cost)
				}
				got, err := run(lean, keysB, argsB...)
				if err != nil {
					t.Fatalf("seed %d step %d: fixed-window check: %v", seed, step, err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: checks %v at %d (limit %d, period %d): fixed script replied %v, composed %v",
						seed, step, argsB, now, limit, period, got, want)
				}
			case r < 9: // a lease writes the state the next check reads
				k, n := rng.IntN(keysPerSeed), 1+rng.Int64N(limit)
				reply, err := run(lease, []string{twinA[k]}, append(args, n, n)...)
				if _, errB := run(lease, []string{twinB[k]}, append(args, n, n)...); err != nil || errB != nil {
					t.Fatalf("seed %d step %d: lease: %v, %v", seed, step, err, errB)
				}
				lastEnd = reply[4]
			default: // a return writes it without touching the expiry
				k, n := rng.IntN(keysPerSeed), 1+rng.Int64N(limit)
				for _, key := range []string{twinA[k], twinB[k]} {
					if err := redis.NewScript(give.src.(string)).Run(ctx, c, []string{key}, append(args, n, lastEnd)...).Err(); err != nil {
						t.Fatalf("seed %d step %d: return: %v", seed, step, err)
					}
				}
			}
			for k := range keysPerSeed {
				a, b := twinA[k], twinB[k]
				hashA, hashB := c.HGetAll(ctx, a).Val(), c.HGetAll(ctx, b).Val()
				if fmt.Sprint(hashA) != fmt.Sprint(hashB) {
					t.Fatalf("seed %d step %d: state of key %d %v, composed %v", seed, step, k, hashB, hashA)
				}
				if ea, eb := c.PExpireTime(ctx, a).Val(), c.PExpireTime(ctx, b).Val(); ea != eb {
					t.Fatalf("seed %d step %d: expiry of key %d %v, composed %v", seed, step, k, eb, ea)
				}
			}
		}
	}
}

// TestFixedCheckLeavesUnreadStateAlone: a key the fixed-window script cannot
// read (not a hash, a field that is not an integer) answers granted -1 and
// is left as it was, and the other checks of the same call are answered.
func TestFixedCheckLeavesUnreadStateAlone(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client()
	now := time.Now().UTC().Add(48 * time.Hour).UnixMicro()
	c.Set(ctx, "string", "x", 0)
	c.HSet(ctx, "float", "w", "0", "c", "1.5", "x", "0")
	c.HSet(ctx, "word", "w", "0", "c", "1", "x", "soon")
	keys := []string{"good", "string", "float", "word", "good"}
	var args []any
	for range keys {
		args = append(args, 10, int64(time.Minute/time.Microsecond), now, 1)
	}
	got, err := redis.NewScript(scripts[opCheckFixed].src.(string)).Run(ctx, c, keys, args...).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	granted := []int64{got[0], got[6], got[12], got[18], got[24]}
	if want := []int64{1, -1, -1, -1, 1}; !slices.Equal(granted, want) {
		t.Fatalf("granted %v, want %v (reply %v)", granted, want, got)
	}
	if got[25] != 8 {
		t.Fatalf("the second check of good left %d, want 8", got[25])
	}
	if v := c.HGet(ctx, "float", "c").Val(); v != "1.5" {
		t.Fatalf("float's count is %q after the call, want it untouched", v)
	}
}

// TestFixedCheckReadsServerTime: with no now argument the fixed-window
// script reads TIME, as the composed one does, once for all its checks.
func TestFixedCheckReadsServerTime(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t).Client()
	before, err := c.Time(ctx).Result() // Redis's clock, read around the call
	if err != nil {
		t.Fatal(err)
	}
	got, err := redis.NewScript(scripts[opCheckFixed].src.(string)).Run(ctx, c, []string{"k", "k"},
		10, int64(time.Hour/time.Microsecond), "", 1, 10, int64(time.Hour/time.Microsecond), "", 1).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	after, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now := got[5]
	if now < before.UnixMicro() || now > after.UnixMicro() {
		t.Fatalf("reply %v: now %d is not Redis's clock (TIME read %d before the call, %d after)", got, now, before.UnixMicro(), after.UnixMicro())
	}
	if got[0] != 1 || got[1] != 9 || got[6] != 1 || got[7] != 8 {
		t.Fatalf("reply %v, want 1 granted, 9 remaining, then 1 granted, 8 remaining", got)
	}
	if got[11] != now {
		t.Fatalf("reply %v: the two checks read different clocks (%d, %d): TIME is read once a call", got, now, got[11])
	}
}

// TestFixedChecksShareAScriptCall: on one server, the fixed-window checks a
// dispatcher sends together are one script call. 64 goroutines race for one
// key and several others: exactly Limit checks of the hot key are admitted,
// every other key's checks are all admitted, and Redis runs fewer script
// calls than checks. (On a Cluster client each check is a call of its own:
// the keys of a call must share a slot.)
func TestFixedChecksShareAScriptCall(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	s, err := New(srv.Client(), Options{Pipelines: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 300, Period: time.Hour}
	now := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Hour)
	const goroutines, each = 64, 20
	var admitted [2]atomic.Int64 // hot, others
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key, which := "hot", 0
				if i%2 == 1 {
					key, which = fmt.Sprintf("cold/%d", g), 1
				}
				d, err := s.Check(ctx, key, rule, 1, now)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted[which].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if hot, cold := admitted[0].Load(), admitted[1].Load(); hot != rule.Limit || cold != goroutines*each/2 {
		t.Fatalf("admitted %d of the hot key's %d checks (want %d) and %d of the others' %d (want all)",
			hot, goroutines*each/2, rule.Limit, cold, goroutines*each/2)
	}
	calls, err := srv.CommandCalls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scriptCalls := calls["evalsha"] + calls["eval"]
	if scriptCalls >= goroutines*each {
		t.Fatalf("%d script calls for %d checks: the checks of a round trip were not sent as one call", scriptCalls, goroutines*each)
	}
	t.Logf("%d checks in %d script calls, %d round trips", goroutines*each, scriptCalls, s.Stats().RoundTrips)
}
