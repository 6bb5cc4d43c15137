package redisstore_test

import (
	"bufio"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// BenchmarkRedisCPUPerCheck measures what a check costs Redis, the resource a
// fleet shares: the server's CPU (user + system, from INFO CPU) per check,
// the store as the sidecar runs it (ServerTime: the script reads TIME), from
// 1 caller (a round trip per check) and from 16 (the store sends what its
// callers have queued in one pipeline). The baseline is what
// envoyproxy/ratelimit sends per check with its defaults (no implicit
// pipelining across requests): INCRBY and PEXPIRE in one round trip per
// check, against the same server in the same run.
//
//	go test -run '^$' -bench RedisCPUPerCheck -count 6 ./pkg/gale/redisstore/ | tee cpu.txt
//	benchstat -col /op cpu.txt
func BenchmarkRedisCPUPerCheck(b *testing.B) {
	c := testenv.StartRedis(b).Client()
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d/op=incrby+pexpire", callers), func(b *testing.B) {
			redisCPU(b, c, callers, func(key string) error {
				p := c.Pipeline()
				p.IncrBy(ctx, key, 1)
				p.PExpire(ctx, key, time.Hour)
				_, err := p.Exec(ctx)
				return err
			})
		})
		for _, r := range []struct {
			name string
			rule gale.Rule
		}{
			{"fixed_window", gale.Rule{Algorithm: gale.FixedWindow, Limit: gale.MaxLimit, Period: time.Hour}},
			{"fixed_window_denied", gale.Rule{Algorithm: gale.FixedWindow, Limit: 1, Period: time.Hour}},
			{"sliding_window", gale.Rule{Algorithm: gale.SlidingWindow, Limit: gale.MaxLimit, Period: time.Hour}},
			{"gcra", gale.Rule{Algorithm: gale.GCRA, Limit: gale.MaxLimit, Period: time.Second}},
			{"token_bucket", gale.Rule{Algorithm: gale.TokenBucket, Limit: gale.MaxLimit, Period: time.Second}},
			{"quota", gale.Rule{Algorithm: gale.Quota, Limit: gale.MaxLimit, Calendar: gale.Month}},
		} {
			b.Run(fmt.Sprintf("callers=%d/op=%s", callers, r.name), func(b *testing.B) {
				s, err := redisstore.New(c, redisstore.Options{ServerTime: true})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				now := time.Now()
				if _, err := s.Check(ctx, "warm-up", r.rule, 1, now); err != nil { // cache the script
					b.Fatal(err)
				}
				redisCPU(b, c, callers, func(key string) error {
					_, err := s.Check(ctx, key, r.rule, 1, now)
					return err
				})
			})
		}
	}
}

// redisCPU runs check b.N times from callers goroutines, each on a key of
// its own, and reports the Redis server's CPU per call in µs (redis-µs/op).
func redisCPU(b *testing.B, c *redis.Client, callers int, check func(key string) error) {
	b.Helper()
	var id atomic.Int64
	next := func() string { return fmt.Sprintf("bench/%s/%d", b.Name(), id.Add(1)) }
	if err := check(next()); err != nil { // a denied rule's key is full from here
		b.Fatal(err)
	}
	id.Store(0)
	before := serverCPU(b, c)
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		key := next()
		for i := 0; i < b.N; i++ {
			if err := check(key); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism((callers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			key := next()
			for pb.Next() {
				if err := check(key); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	used := serverCPU(b, c) - before
	b.ReportMetric(used.Seconds()*1e6/float64(b.N), "redis-µs/op")
}

// serverCPU is the Redis server's CPU so far, user and system, by INFO CPU
// (microsecond resolution).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	b.Helper()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	var seen int
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			b.Fatalf("INFO CPU: %s: %v", sc.Text(), err)
		}
		total += v
		seen++
	}
	if seen != 2 {
		b.Fatalf("INFO CPU has no used_cpu_sys and used_cpu_user: %q", info)
	}
	return time.Duration(total * float64(time.Second))
}
