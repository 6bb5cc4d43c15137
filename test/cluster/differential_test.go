package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestClusterAnswersAsOneRedis drives two engines with one random request
// sequence on one fake timeline: one over a single redis-server, one over
// a 3-primary Redis Cluster. Every mode (strict, cached_deny, leased
// window-coupled and uncoupled, fair) must give the same answer at every
// step (code, remaining, time until reset), and the keys must be spread over
// all three primaries and many slots.
func TestClusterAnswersAsOneRedis(t *testing.T) {
	single := testenv.StartRedis(t)
	cl := testenv.StartCluster(t, 3)
	src := modePolicy(5, "minute", "error")
	// The test compares answers, not latency: no deadline a loaded machine
	// can miss (testenv.StoreDeadline).
	patient := redisstore.Options{Timeout: testenv.StoreDeadline}
	one, _ := newEngine(t, single.Client(), patient, src, testenv.StoreDeadline)
	many, _ := newEngine(t, cl.PatientClient(), patient, src, testenv.StoreDeadline)

	// Half the requests go to a few hot values (so limits are reached),
	// half to many cold ones (so keys spread over many slots).
	const steps, hot, cold = 2000, 6, 256
	rng := rand.New(rand.NewPCG(13, 3))
	now := t0
	denied := map[string]int{}
	for i := 0; i < steps; i++ {
		now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		m := modes[rng.IntN(len(modes))].key
		v := fmt.Sprintf("hot%d", rng.IntN(hot))
		if rng.IntN(2) == 0 {
			v = fmt.Sprintf("cold%d", rng.IntN(cold))
		}
		hits := uint32(1)
		if rng.IntN(8) == 0 {
			hits = 3
		}
		req := request(m, v, hits)
		a, err := one.Decide(bg, req, now)
		if err != nil {
			t.Fatalf("step %d (%s=%s +%d at %v): one Redis: %v", i, m, v, hits, now.Sub(t0), err)
		}
		b, err := many.Decide(bg, req, now)
		if err != nil {
			t.Fatalf("step %d (%s=%s +%d at %v): cluster: %v", i, m, v, hits, now.Sub(t0), err)
		}
		if wa, wb := answer(a), answer(b); wa != wb {
			t.Fatalf("step %d (%s=%s +%d at %v): one Redis says %s, the cluster %s", i, m, v, hits, now.Sub(t0), wa, wb)
		}
		if a.Code.String() == "OVER_LIMIT" {
			denied[m]++
		}
	}
	for _, m := range modes {
		if denied[m.key] == 0 {
			t.Errorf("%s never denied in %d steps: the sequence does not test its limit", m.key, steps)
		}
	}
	t.Logf("denials per mode: %v", denied)

	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	slots := map[int]bool{}
	for _, addr := range cl.Addrs {
		keys, err := cl.NodeClient(addr).Keys(ctx, "tk:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Errorf("primary %s holds no key", addr)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "tk:{") || !strings.HasSuffix(k, "}") {
				t.Errorf("key %q is not tk:{...}", k)
			}
			s, err := cl.KeySlot(k)
			if err != nil {
				t.Fatal(err)
			}
			slots[s] = true
		}
	}
	if len(slots) < 100 {
		t.Errorf("keys in %d slots, want ≥ 100", len(slots))
	}
	t.Logf("keys in %d slots over %d primaries", len(slots), len(cl.Addrs))
}
