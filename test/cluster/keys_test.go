package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/engine"
)

// windowedModes are the modes TestLiveReshard tracks key by key (fair
// counts all tenants in one key).
var windowedModes = []string{"strict", "cached_deny", "leased", "leased_uncoupled"}

// pickKeys chooses, for every windowed mode, up to 3 values whose Redis key
// lies in the lowest n slots of the primary at from (the slots Reshard moves)
// and one whose key lies on another primary. It learns each mode's Redis key
// layout from one probe check (the engine's key ends with the value's field,
// len(value) ":" value, inside redisstore's "{...}" hash tag), derives the
// key of each candidate value, and asks Redis for its slot (CLUSTER KEYSLOT).
func pickKeys(t *testing.T, cl *testenv.Cluster, e *engine.Engine, from string, n int) []trackedKey {
	t.Helper()
	// The slots' owners are read once: a CLUSTER SLOTS per slot looked up
	// took the 20 seconds this setup once had on a loaded machine, and
	// the probe that followed failed with "context deadline exceeded".
	owners, err := cl.SlotOwners()
	if err != nil {
		t.Fatal(err)
	}
	var lowest []int // the n lowest slots of from
	for s := 0; s < 16384 && len(lowest) < n; s++ {
		if owners[s] == from {
			lowest = append(lowest, s)
		}
		if len(lowest) == 0 && s > 0 {
			break // from does not serve slot 0: StartCluster gives it the first range
		}
	}
	moved := map[int]bool{}
	for _, s := range lowest {
		moved[s] = true
	}
	var keys []trackedKey
	for _, m := range windowedModes {
		probe := redisKeyOf(t, cl, e, m, "probe")
		base := strings.TrimSuffix(probe, "5:probe}")
		var moving, staying []trackedKey
		for i := 0; i < 400 && (len(moving) < 3 || len(staying) < 1); i++ {
			v := fmt.Sprintf("r%03d", i)
			k := trackedKey{mode: m, value: v, redisKey: base + "4:" + v + "}"}
			slot, err := cl.KeySlot(k.redisKey)
			if err != nil {
				t.Fatal(err)
			}
			k.owner, k.slot, k.moves = owners[slot], slot, moved[slot]
			switch {
			case k.moves && len(moving) < 3:
				moving = append(moving, k)
			case !k.moves && k.owner != from && len(staying) < 1:
				staying = append(staying, k)
			}
		}
		if len(moving) == 0 {
			t.Fatalf("%s: no value of 400 has its key in the %d slots that move", m, n)
		}
		keys = append(append(keys, moving...), staying...)
	}
	return keys
}

// redisKeyOf makes one check of (mode, value) and returns the name of the
// one Redis key holding it, found on the cluster's primaries. Its calls are
// setup, not measured: one deadline a loaded machine cannot miss bounds
// them, the engine's own (testenv.StoreDeadline in TestLiveReshard) each
// check.
//
// The key lives until its one-second window ends (Redis's clock): a
// machine that stalls past that between the check and the search finds
// none (TestLiveReshard failed so beside a second make test: "Redis keys
// [], want exactly one"). A search that finds none probes again, up to
// five times; more than one key is a failure at once.
func redisKeyOf(t *testing.T, cl *testenv.Cluster, e *engine.Engine, mode, value string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, testenv.StoreDeadline)
	defer cancel()
	field := fmt.Sprintf("%d:%s", len(mode), mode)
	var found []string
	for attempt := 0; attempt < 5; attempt++ {
		if _, err := e.Decide(ctx, request(mode, value, 1), time.Now()); err != nil {
			t.Fatalf("probe %s: %v", mode, err)
		}
		found = found[:0]
		for _, a := range cl.Addrs {
			names, err := cl.NodeClient(a).Keys(ctx, fmt.Sprintf("tk:{*%d:%s}", len(value), value)).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range names {
				if strings.Contains(k, field) {
					found = append(found, k)
				}
			}
		}
		if len(found) != 0 {
			break
		}
		t.Logf("probe %s: its key had expired before the search (attempt %d): probing again", mode, attempt+1)
	}
	if len(found) != 1 {
		t.Fatalf("probe %s: Redis keys %q, want exactly one", mode, found)
	}
	return found[0]
}
