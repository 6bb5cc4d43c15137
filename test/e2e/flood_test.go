package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttlekit/throttlekit/internal/testenv"
)

// The key flood's rule and load. The sidecar has no flag for L1's size, so
// every limiter holds gale.DefaultMaxKeys keys (2^16).
const (
	floodMaxKeys = 1 << 16 // gale.DefaultMaxKeys: what the binary runs with
	floodLimit   = 500     // per key per hour
	floodBatch   = 10
	floodWorkers = 6
	floodHotKeys = 4
	floodKeys    = floodMaxKeys * 3 / 2 // unique keys the flood sends: L1 fills, then evicts
	// The flood's speed is the machine's, and nothing here judges it (the
	// log reports it): a loaded machine floods slower, and only a flood
	// that answers no request for floodStall has stopped. A call's
	// deadline is as long: the test measures memory and counts, not how
	// fast a starved sidecar answers 64 descriptors.
	floodStall        = 60 * time.Second
	floodCallDeadline = floodStall
	// floodStoreTimeout is the sidecar's --store-timeout. The test does
	// not measure the store's deadline, and a lease batch of 64 keys on a
	// starved Redis missed 2 s (846 requests failed at load average 30,
	// and their leases, counted in Redis and held nowhere, broke the
	// credit accounting): a store call here waits as long as a stalled
	// flood is given.
	floodStoreTimeout = floodStall / 2
	// floodBytesPerKey is L1's heap per key at 1M keys (pkg/gale's
	// BenchmarkL1BytesPerKey, 48-byte keys: 488 B), rounded up.
	floodBytesPerKey = 512
)

func floodPolicy() string {
	return fmt.Sprintf(`domain: flood
descriptors:
  - key: user
    rate_limit: {name: flood_user, unit: hour, requests_per_unit: %d}
    mode: leased
    lease: {batch: %d}
`, floodLimit, floodBatch)
}

// TestE2EKeyFlood floods a leased rule of a redis-backed sidecar with
// unique keys (64 descriptors a request, from floodWorkers goroutines, as
// fast as the box goes) until it has sent 1.5 × MaxKeys of them, while
// floodHotKeys hot keys are asked steadily on the same rule, so they share
// its L1 with the flood. It asserts:
//   - throttlekit_l1_keys never exceeds MaxKeys (sampled every 100 ms);
//   - RSS (the Go heap under -race) stays under base + 4 × MaxKeys ×
//     floodBytesPerKey (see the bound
//     below);
//   - eviction returns credits: once the flood has ended, the windows'
//     counts in Redis exceed the units admitted by no more than the
//     credits the keys still in L1 can hold; without the returns they
//     would exceed it by (batch − 1) per evicted key;
//   - no over-admission, checked exactly on the hot keys: what they were
//     admitted during the flood plus what Redis still grants after it is
//     exactly the limit (not more; not less, which would be credits lost);
//   - the hot keys' local-hit rate (served or denied from L1 without
//     waiting on Redis) is reported and at least 80%.
func TestE2EKeyFlood(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	s := startSidecar(t, options{store: "redis", redisURL: r.URL(),
		args:  []string{"--store-timeout", floodStoreTimeout.String()}, // a starved box must not turn the flood into fallbacks
		files: map[string]string{"flood.yaml": floodPolicy()}})
	// Its scrapes are not measured either: a sidecar the flood starves
	// answered GET /metrics in more than the harness's 5 s at load 43.
	s.http.Timeout = floodCallDeadline
	pid := s.cmd.Process.Pid
	base, err := sampleSidecar(s, pid)
	if err != nil {
		t.Fatal(err)
	}
	m0 := s.metrics(t)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	// The hot keys: one goroutine each, asking in a loop.
	hotOK := make([]atomic.Int64, floodHotKeys)
	var hotAsked, hotErrs atomic.Int64
	for h := range floodHotKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				resp, err := floodCall(s, request("flood", desc("user", fmt.Sprint("hot-", h))))
				if ctx.Err() != nil {
					return
				}
				hotAsked.Add(1)
				switch {
				case err != nil:
					hotErrs.Add(1)
				case resp.GetOverallCode() == ok:
					hotOK[h].Add(1)
				}
			}
		}()
	}
	// The flood: unique keys, 64 to a request.
	var next, floodOK, floodErrs atomic.Int64
	floodStart := time.Now()
	var answered atomic.Int64 // when a flood request was last answered (Unix ns)
	answered.Store(floodStart.UnixNano())
	var flooding sync.WaitGroup
	for range floodWorkers {
		flooding.Add(1)
		go func() {
			defer flooding.Done()
			for ctx.Err() == nil {
				first := next.Add(64) - 64
				if first >= floodKeys {
					return
				}
				descs := make([]*ratelimitv3.RateLimitDescriptor, 64)
				for i := range descs {
					descs[i] = desc("user", "u"+strconv.FormatInt(first+int64(i), 36))
				}
				resp, err := floodCall(s, request("flood", descs...))
				answered.Store(time.Now().UnixNano())
				if err != nil {
					floodErrs.Add(1)
					continue
				}
				for _, st := range resp.GetStatuses() {
					if st.GetCode() == ok {
						floodOK.Add(1)
					}
				}
			}
		}()
	}
	floodDone := make(chan struct{})
	go func() { flooding.Wait(); close(floodDone) }()

	var maxKeys, maxRSS, maxHeap float64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
sampling:
	for {
		select {
		case <-floodDone:
			break sampling
		case <-tick.C:
		}
		if quiet := time.Since(time.Unix(0, answered.Load())); quiet > floodStall {
			t.Fatalf("the flood stopped: no request answered for %v, %d of %d keys sent in %v (load average %s)",
				quiet.Round(time.Second), next.Load(), floodKeys, time.Since(floodStart).Round(time.Second), testenv.LoadAverage())
		}
		smp, err := sampleSidecar(s, pid)
		if err != nil {
			t.Fatal(err)
		}
		maxKeys, maxRSS, maxHeap = max(maxKeys, smp.l1Keys), max(maxRSS, smp.rss), max(maxHeap, smp.heap)
	}
	floodTook := time.Since(floodStart)
	stop()
	wg.Wait()
	rate := float64(floodKeys) / floodTook.Seconds()

	m1 := s.metrics(t)
	keysNow := m1.get("throttlekit_l1_keys", "domain", "flood")
	maxKeys = max(maxKeys, keysNow)
	if maxKeys > floodMaxKeys {
		t.Errorf("throttlekit_l1_keys reached %v, above MaxKeys %d", maxKeys, floodMaxKeys)
	}
	evictions := m1.get("throttlekit_l1_evictions_total", "domain", "flood") - m0.get("throttlekit_l1_evictions_total", "domain", "flood")
	if evictions == 0 {
		t.Errorf("no key was evicted: the flood did not fill L1")
	}
	// The RSS bound: the process as it started, plus a full L1 at the
	// measured heap per key, times 4: 2 for the garbage a GOGC=100 heap
	// may hold beside the live one, 2 for what the race detector's shadow
	// memory and the allocator's free spans keep (both measured: see the
	// report). The flood's own garbage (requests, leases in flight) is
	// inside the same factor.
	// Under -race RSS is mostly the detector's shadow memory (429 MiB
	// measured): the same bound then applies to the Go heap.
	bound := base.rss + 4*floodMaxKeys*floodBytesPerKey
	what, got, start := "RSS", maxRSS, base.rss
	if raceBuild {
		bound = base.heap + 4*floodMaxKeys*floodBytesPerKey
		what, got, start = "Go heap (RSS under -race is the detector's)", maxHeap, base.heap
	}
	if got > bound {
		t.Errorf("%s reached %.1f MiB, above the bound %.1f MiB (%.1f MiB at start + 4 × %d keys × %d B)",
			what, got/(1<<20), bound/(1<<20), start/(1<<20), floodMaxKeys, floodBytesPerKey)
	}

	// Hot keys: what they were admitted plus what Redis still grants now
	// must be the limit exactly. Their local hits are read before this.
	local := m1.get("throttlekit_local_hits_total", "domain", "flood") - m0.get("throttlekit_local_hits_total", "domain", "flood") +
		m1.get("throttlekit_cached_denials_total", "domain", "flood") - m0.get("throttlekit_cached_denials_total", "domain", "flood")
	hitRate := local / float64(hotAsked.Load())
	for h := range floodHotKeys {
		more := 0
		for range floodLimit + floodBatch {
			resp := s.should(t, request("flood", desc("user", fmt.Sprint("hot-", h))))
			if resp.GetOverallCode() != ok {
				break
			}
			more++
		}
		if total := hotOK[h].Load() + int64(more); total != floodLimit {
			t.Errorf("hot-%d: admitted %d during the flood and %d after: %d, want the limit %d exactly", h, hotOK[h].Load(), more, total, floodLimit)
		}
	}
	if hotErrs.Load() > 0 || floodErrs.Load() > 0 {
		t.Errorf("%d hot and %d flood requests failed", hotErrs.Load(), floodErrs.Load())
	}
	if hitRate < 0.8 {
		t.Errorf("hot keys' local-hit rate %.3f, want ≥ 0.8", hitRate)
	}

	// Eviction returns credits: Redis's counts exceed what was admitted by
	// at most what L1 still holds.
	counted, keys := redisCounts(t, r)
	admitted := floodOK.Load() + floodHotKeys*floodLimit // the hot keys end at their limit, as checked above
	held := m1.get("throttlekit_l1_keys", "domain", "flood") * (floodBatch - 1)
	returned := m1.get("throttlekit_credits_returned_total", "domain", "flood") - m0.get("throttlekit_credits_returned_total", "domain", "flood")
	if excess := float64(counted - admitted); excess > held {
		t.Errorf("Redis counts %d units over %d keys for %d admitted: %v more than the %v L1's %v keys can hold (%v credits returned, %v evictions)",
			counted, keys, admitted, excess, held, keysNow, returned, evictions)
	}
	t.Logf("flood: %d unique keys in %v (%.0f keys/s, %d workers × 64 descriptors a request); L1 keys max %v (MaxKeys %d), %v evictions, %v credits returned; "+
		"RSS %.1f MiB at start, %.1f MiB max; heap %.1f MiB max; bound on %s %.1f MiB; hot keys: %d asked, local-hit rate %.3f; Redis: %d units counted over %d keys, %d admitted",
		floodKeys, floodTook.Round(time.Millisecond), rate, floodWorkers, maxKeys, floodMaxKeys, evictions, returned,
		base.rss/(1<<20), maxRSS/(1<<20), maxHeap/(1<<20), what, bound/(1<<20), hotAsked.Load(), hitRate, counted, keys, admitted)
}

// floodCall is ShouldRateLimit with floodCallDeadline.
func floodCall(s *sidecar, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), floodCallDeadline)
	defer cancel()
	return s.rls.ShouldRateLimit(ctx, req)
}

// redisCounts sums the count field (c) of every window hash the store
// wrote, and counts the keys.
func redisCounts(t *testing.T, r *testenv.Redis) (units int64, keys int) {
	t.Helper()
	c := r.Client()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, "tk:*", 1000).Iterator()
	var names []string
	for iter.Next(ctx) {
		names = append(names, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(names); i += 1000 {
		pipe := c.Pipeline()
		batch := names[i:min(i+1000, len(names))]
		for _, n := range batch {
			pipe.HGet(ctx, n, "c")
		}
		cmds, err := pipe.Exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range cmds {
			v, err := strconv.ParseInt(cmd.(interface{ Val() string }).Val(), 10, 64)
			if err != nil {
				t.Fatalf("a window's count: %v", err)
			}
			units += v
		}
	}
	return units, len(names)
}
