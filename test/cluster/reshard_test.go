package cluster

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
)

var reshardSlots = flag.Int("reshard-slots", 1000, "TestLiveReshard: how many slots redis-cli moves from the first primary to the second")

// reshardLimit and reshardBatch are the per-second limit of every rule of
// TestLiveReshard and the leased rules' batch.
const (
	reshardLimit = 20
	reshardBatch = 4
)

// A tracked key: a descriptor (mode, value) and the Redis key holding it.
type trackedKey struct {
	mode, value, redisKey string
	slot                  int
	owner                 string // the primary serving slot before the move
	moves                 bool
}

// TestLiveReshard runs concurrent callers on keys of every windowed mode
// while `redis-cli --cluster reshard` moves the slots holding most of them
// to another primary. It checks that no answer is wrong (admissions per
// key per one-second window ≤ the limit, plus batch−1 for uncoupled
// leases, counted in the window the answer says it was counted in), that
// errors happen only while slots move, are store failures the rule's
// on_store_error (error) explains and are under 1% of the answers then,
// that traffic ran during the move, and that the moved keys then live on
// the new primary.
func TestLiveReshard(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	from, to := cl.Addrs[0], cl.Addrs[1]
	// Redis's clock decides windows, as in the sidecar: with callers'
	// stamps, a check whose stamp is late when it reaches Redis finds the
	// state already expired by Redis's clock and opens the window again
	// (redisstore's doc, "Time"), 21–24 admissions a second for a limit
	// of 20 on this cluster. Every store deadline, the client's included,
	// is testenv.StoreDeadline, not the sidecar's 50ms: the test judges
	// the answers and the errors a move causes, not latency, and a loaded
	// machine under -race stalls a round trip past any short deadline with
	// no reshard at all (the probe of pickKeys failed so, "context
	// deadline exceeded", with 500ms).
	e, store := newEngine(t, cl.PatientClient(), redisstore.Options{ServerTime: true, Timeout: testenv.StoreDeadline},
		modePolicy(reshardLimit, "second", "error"), testenv.StoreDeadline)
	keys := pickKeys(t, cl, e, from, *reshardSlots)

	var (
		mu       sync.Mutex
		admitted = map[string]int{} // mode/value/second → admissions
		answers  atomic.Int64
		moving   atomic.Bool
		during   atomic.Int64 // answers that ended while slots moved
		duringOK atomic.Int64 // admissions among them
		failures []string     // errors outside the move, or not store errors
		moveErrs atomic.Int64 // store errors while slots moved
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for !stop.Load() {
				k := keys[rng.IntN(len(keys))]
				wasMoving := moving.Load()
				now := time.Now()
				ctx, cancel := context.WithTimeout(bg, testenv.StoreDeadline)
				resp, err := e.Decide(ctx, request(k.mode, k.value, 1), now)
				cancel()
				inMove := wasMoving || moving.Load()
				answers.Add(1)
				if inMove {
					during.Add(1)
				}
				switch {
				case err != nil && inMove && errors.Is(err, gale.ErrStore):
					moveErrs.Add(1)
				case err != nil:
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s=%s (moving %v): %v", k.mode, k.value, inMove, err))
					mu.Unlock()
				case resp.Code.String() == "OK":
					if inMove {
						duringOK.Add(1)
					}
					// Count it in the window the store counted it in: a
					// stamp that reaches Redis after a later one has
					// opened the next window is read in that window
					// (redisstore's strategy.lua, Rule.clock).
					// Windows end on whole seconds of Redis's clock; the
					// caller's is the same clock, a little behind.
					end := now.Add(resp.Statuses[0].UntilReset).Round(time.Second)
					mu.Lock()
					admitted[fmt.Sprintf("%s/%s/%d", k.mode, k.value, end.UnixMilli())]++
					mu.Unlock()
				case resp.Code.String() != "OVER_LIMIT":
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s=%s: code %s", k.mode, k.value, resp.Code))
					mu.Unlock()
				}
			}
		}(uint64(w))
	}
	waitAnswers := func(n int64) {
		target := answers.Load() + n
		if !testenv.Eventually(func() bool { return answers.Load() >= target }) {
			t.Errorf("traffic stalled: %d answers, waiting for %d", answers.Load(), target)
		}
	}
	waitAnswers(300)
	moving.Store(true)
	start := time.Now()
	err := cl.Reshard(from, to, *reshardSlots)
	took := time.Since(start)
	moving.Store(false)
	waitAnswers(300)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("reshard of %d slots took %v; %d answers, %d while moving (%d admitted), %d store errors while moving; store %+v",
		*reshardSlots, took, answers.Load(), during.Load(), duringOK.Load(), moveErrs.Load(), store.Stats())
	for _, f := range failures[:min(len(failures), 10)] {
		t.Errorf("wrong answer or unexplained error: %s", f)
	}
	if len(failures) > 10 {
		t.Errorf("... and %d more", len(failures)-10)
	}
	for k, n := range admitted {
		bound := reshardLimit
		if strings.HasPrefix(k, "leased_uncoupled/") {
			bound += reshardBatch - 1
		}
		if n > bound {
			t.Errorf("%s: %d admissions in one second, limit %d", k, n, bound)
		}
	}
	// The client follows ASK and MOVED (MaxRedirects, not MaxRetries), so
	// a reshard should cost no error at all; a few multi-key scripts may
	// meet TRYAGAIN while their slot is half-moved.
	if moveErrs.Load() > during.Load()/100 {
		t.Errorf("%d store errors in %d answers while slots moved: more than 1%%", moveErrs.Load(), during.Load())
	}
	if during.Load() == 0 || duringOK.Load() == 0 {
		t.Errorf("%d answers, %d admissions while slots moved: the move ran without traffic", during.Load(), duringOK.Load())
	}

	// The moved keys now live on the new primary: a check writes them there.
	for _, k := range keys {
		want := k.owner
		if k.moves {
			want = to
		}
		if o, err := cl.SlotOwner(k.slot); err != nil || o != want {
			t.Errorf("%s=%s: slot %d on %s (%v), want %s", k.mode, k.value, k.slot, o, err, want)
			continue
		}
		node := cl.NodeClient(want)
		if !testenv.Eventually(func() bool {
			resp, err := e.Decide(bg, request(k.mode, k.value, 1), time.Now())
			if err != nil || resp.Code.String() != "OK" {
				return false
			}
			n, err := node.Exists(bg, k.redisKey).Result()
			return err == nil && n == 1
		}) {
			t.Errorf("%s=%s: %s not found on %s after a check", k.mode, k.value, k.redisKey, want)
		}
	}
}
