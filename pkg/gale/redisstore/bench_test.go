package redisstore_test

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// BenchmarkCheck measures store-level checks at 1, 16 and 64 concurrent
// callers with the default options, reporting round trips per check.
//
//	go test -run '^$' -bench Check -benchtime 2s ./pkg/gale/redisstore/
func BenchmarkCheck(b *testing.B) {
	c := testenv.StartRedis(b).Client()
	for _, callers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			benchCheck(b, c, redisstore.Options{}, callers)
		})
	}
}

// BenchmarkPipelines is the measurement behind DefaultPipelines.
//
//	go test -run '^$' -bench Pipelines -benchtime 2s ./pkg/gale/redisstore/
func BenchmarkPipelines(b *testing.B) {
	c := testenv.StartRedis(b).Client()
	for _, p := range []int{1, 2, 3, 4, 8} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("pipelines=%d/callers=%d", p, callers), func(b *testing.B) {
				benchCheck(b, c, redisstore.Options{Pipelines: p}, callers)
			})
		}
	}
}

// benchCheck runs b.N checks from callers goroutines, each on its own key,
// against a rule that always admits.
func benchCheck(b *testing.B, c *redis.Client, opts redisstore.Options, callers int) {
	s, err := redisstore.New(c, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := gale.Rule{Algorithm: gale.GCRA, Limit: gale.MaxLimit, Period: time.Second}
	now := time.Now()
	var id atomic.Int64
	check := func(key string) {
		if d, err := s.Check(ctx, key, r, 1, now); err != nil || !d.Allowed {
			b.Fatalf("%+v, %v", d, err)
		}
	}
	check("warm-up") // cache the script
	before := s.Stats()
	b.ReportAllocs()
	b.ResetTimer()
	if callers == 1 {
		for i := 0; i < b.N; i++ {
			check("bench/0")
		}
	} else {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((callers + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprintf("bench/%d", id.Add(1))
			for pb.Next() {
				check(key)
			}
		})
	}
	b.StopTimer()
	after := s.Stats()
	b.ReportMetric(float64(after.RoundTrips-before.RoundTrips)/float64(after.Ops-before.Ops), "rtt/op")
}

// BenchmarkPing is the floor the others stand on: one PING round trip to the
// same server.
func BenchmarkPing(b *testing.B) {
	c := testenv.StartRedis(b).Client()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
