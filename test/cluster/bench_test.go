package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// BenchmarkClusterThroughput makes strict checks of 10,000 keys from 64
// concurrent callers through the engine and the Redis store (the sidecar's
// settings: ServerTime, 2 pipelines) over a Redis Cluster of 1 and of 3
// primaries. It reports checks/s and the Redis CPU time per check, summed
// over the primaries (INFO CPU).
//
//	go test -run '^$' -bench ClusterThroughput -benchtime 5s -count 5 ./test/cluster
func BenchmarkClusterThroughput(b *testing.B) {
	for _, primaries := range []int{1, 3} {
		b.Run(fmt.Sprintf("primaries=%d", primaries), func(b *testing.B) {
			cl := testenv.StartCluster(b, primaries)
			e, _ := newEngine(b, cl.Client(), redisstore.Options{ServerTime: true},
				modePolicy(1_000_000, "hour", "error"), time.Second)
			const keys = 10_000
			reqs := make([]string, keys)
			for i := range reqs {
				reqs[i] = fmt.Sprintf("k%05d", i)
			}
			ctx := context.Background()
			cpu0, err := cl.CPU(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var next, failed atomic.Int64
			b.SetParallelism(32) // 64 callers on 2 cores
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					v := reqs[next.Add(1)%keys]
					resp, err := e.Decide(ctx, request("strict", v, 1), time.Now())
					if err != nil || resp.Code.String() != "OK" {
						failed.Add(1)
					}
				}
			})
			elapsed := time.Since(start)
			b.StopTimer()
			cpu1, err := cl.CPU(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d checks failed or were denied", n, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "checks/s")
			b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "redis-cpu-µs/check")
		})
	}
}
