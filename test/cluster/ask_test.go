package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

// TestPipelineFollowsAskAndMoved holds one slot half-migrated — marked
// MIGRATING on its primary A and IMPORTING on B, one of its two keys
// already on B — while concurrent checks on both keys go through the Redis
// store's pipelines over the sidecar's ClusterClient (MaxRetries −1). A
// check of the moved key gets ASK from A (and NOSCRIPT from B, which has
// never run the script, then ASK again for the EVAL); the other runs on A.
// Every check must be admitted exactly once: the remainings of each key are
// distinct and the count stored is the number of checks. After the slot is
// assigned to B, the client's stale slot map gets MOVED, which it follows.
// It judges counts, not latency: its client and store have deadlines a
// loaded machine cannot miss (testenv.StoreDeadline).
func TestPipelineFollowsAskAndMoved(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	s, err := redisstore.New(cl.PatientClient(), redisstore.Options{Pipelines: 1, Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// One deadline for all the test's calls, each of which the store also
	// bounds by StoreDeadline.
	ctx, cancel := context.WithTimeout(bg, 2*testenv.StoreDeadline)
	defer cancel()
	rule := gale.Rule{Algorithm: gale.FixedWindow, Limit: 1000, Period: time.Hour}
	// "same" and "same}2" are stored as tk:{same} and tk:{same}2}: one hash
	// tag, one slot.
	moved, stays := "same", "same}2"
	check := func(key string) gale.Decision {
		d, err := s.Check(ctx, key, rule, 1, t0)
		if err != nil {
			t.Errorf("check %q: %v", key, err)
		}
		if !d.Allowed {
			t.Errorf("check %q denied: %+v", key, d)
		}
		return d
	}
	check(moved)
	check(stays)

	slot, err := cl.KeySlot(s.Key(moved))
	if err != nil {
		t.Fatal(err)
	}
	if other, _ := cl.KeySlot(s.Key(stays)); other != slot {
		t.Fatalf("%s in slot %d, %s in %d: want one slot", s.Key(moved), slot, s.Key(stays), other)
	}
	a, _ := cl.SlotOwner(slot)
	b := cl.Addrs[0]
	if b == a {
		b = cl.Addrs[1]
	}
	aID, _ := cl.NodeID(a)
	bID, _ := cl.NodeID(b)
	na, nb := cl.NodeClient(a), cl.NodeClient(b)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(nb.Do(ctx, "cluster", "setslot", slot, "importing", aID).Err())
	must(na.Do(ctx, "cluster", "setslot", slot, "migrating", bID).Err())
	host, port := splitAddr(t, b)
	must(na.Do(ctx, "migrate", host, port, "", 0, 5000, "keys", s.Key(moved)).Err())

	const each = 32
	remaining := map[string][]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	before := s.Stats()
	for i := 0; i < 2*each; i++ {
		key := moved
		if i%2 == 1 {
			key = stays
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := check(key)
			mu.Lock()
			remaining[key] = append(remaining[key], d.Remaining)
			mu.Unlock()
		}()
	}
	wg.Wait()
	stats := s.Stats()
	t.Logf("half-migrated slot %d (%s → %s): %d ops in %d round trips", slot, a, b,
		stats.Ops-before.Ops, stats.RoundTrips-before.RoundTrips)
	for key, rs := range remaining {
		slices.Sort(rs)
		if len(slices.Compact(rs)) != each || rs[0] != 1000-1-each || rs[len(rs)-1] != 1000-2 {
			t.Errorf("%q: remainings %v, want each of %d..%d once", key, rs, 1000-1-each, 1000-2)
		}
	}

	must(cl.MoveSlots([]int{slot}, b))
	for range 10 {
		check(moved)
		check(stays)
	}
	for _, key := range []string{moved, stays} {
		c, err := nb.HGet(ctx, s.Key(key), "c").Int()
		if err != nil || c != 1+each+10 {
			t.Errorf("%s on %s: count %d (%v), want %d", s.Key(key), b, c, err, 1+each+10)
		}
	}
}
