package rediscoord_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed"
	"github.com/throttlekit/throttlekit/pkg/adaptive/distributed/rediscoord"
)

// BenchmarkHeartbeat measures one node's heartbeats, with handoff, on a
// gate of 4 and of 32 live nodes: one round trip each (evalsha/op, from
// the server's command counts), the script reading the whole gate
// (redis-µs/op, the server's time in it, from INFO commandstats).
//
//	go test -run '^$' -bench Heartbeat -benchtime 2s ./pkg/adaptive/distributed/rediscoord/
func BenchmarkHeartbeat(b *testing.B) {
	srv := testenv.StartRedis(b)
	c, err := rediscoord.New(srv.Client(), rediscoord.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := distributed.Config{LeaseTTL: time.Hour, Handoff: true}
	for _, nodes := range []int{4, 32} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			gate := fmt.Sprintf("bench/%d/%d", nodes, time.Now().UnixNano()) // b.Run runs this more than once
			for i := range nodes {
				rep := distributed.Report{Node: fmt.Sprintf("n%02d", i), Instance: "i", Seq: 1, Local: 100, Inflight: 1}
				if _, err := c.Heartbeat(ctx, gate, rep, cfg, t0); err != nil {
					b.Fatal(err)
				}
			}
			rep := distributed.Report{Node: "n00", Instance: "i", Seq: 1, Local: 100, Inflight: 1}
			rc := srv.Client()
			before, err := srv.CommandCalls(ctx)
			if err != nil {
				b.Fatal(err)
			}
			usBefore := evalshaMicros(b, rc)
			b.ReportAllocs()
			ops := 0
			for b.Loop() {
				rep.Seq++
				g, err := c.Heartbeat(ctx, gate, rep, cfg, t0)
				if err != nil || g.Status != distributed.Granted || g.Live != nodes {
					b.Fatalf("%s, %v", show(g), err)
				}
				rep.AppliedGen = g.Gen
				ops++
			}
			after, err := srv.CommandCalls(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(after["evalsha"]-before["evalsha"])/float64(ops), "evalsha/op")
			b.ReportMetric(float64(evalshaMicros(b, rc)-usBefore)/float64(ops), "redis-µs/op")
		})
	}
}

// evalshaMicros is the server's time in EVALSHA so far, µs, from a line
// "cmdstat_evalsha:calls=12,usec=34,..." of INFO commandstats.
func evalshaMicros(b *testing.B, rc *redis.Client) int64 {
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for kv := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "usec="); ok {
					us, _ := strconv.ParseInt(v, 10, 64)
					return us
				}
			}
		}
	}
	return 0
}
