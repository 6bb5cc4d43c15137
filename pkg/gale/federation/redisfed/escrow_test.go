package redisfed_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

// newEscrow starts a Redis server for t and returns an Escrow on it. A zero
// opts.Timeout is StoreDeadline: no test of it times a round trip.
func newEscrow(t testing.TB, opts redisfed.EscrowOptions) (*redisfed.Escrow, *testenv.Redis) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = testenv.StoreDeadline
	}
	srv := testenv.StartRedis(t)
	e, err := redisfed.NewEscrow(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return e, srv
}

func TestEscrowConformance(t *testing.T) {
	e, _ := newEscrow(t, redisfed.EscrowOptions{})
	federationtest.RunEscrow(t, func(*testing.T) federation.Escrow { return e })
}

// TestEscrowDifferential: the memory escrow and the Redis one, step for
// step on random schedules.
func TestEscrowDifferential(t *testing.T) {
	e, _ := newEscrow(t, redisfed.EscrowOptions{})
	for seed := range uint64(5) {
		escrowDifferential(t, seed, 4000, federation.NewMemoryEscrow(), e)
	}
}

// escrowDifferential drives want (the reference, usually the MemoryEscrow)
// and got with one random schedule of takes, refills and releases over a
// few keys, on a fake clock of one-minute coordinator windows, and fails at
// the first step where their answers differ. The schedule has join-only
// refills (TTL 0), stale grants of older windows, grants of the next
// window, TTLs shorter and longer than the window, deaths (the clock
// stepping past deadlines, sometimes exactly onto a window's end), and
// releases of dead, live and absent balances. Both escrows must read the
// callers' clock. Times are whole microseconds, the Redis escrow's
// resolution.
func escrowDifferential(t *testing.T, seed uint64, steps int, want, got federation.Escrow) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const window = time.Minute
	prefix := fmt.Sprintf("escrow-diff/%d/%d/", seed, time.Now().UnixNano())
	t0 := storetest.Timeline()
	now := t0
	// end names the window k windows after the one now is in.
	end := func(k int) time.Time { return t0.Add((now.Sub(t0)/window + 1 + time.Duration(k)) * window) }
	micros := func(max time.Duration) time.Duration {
		return time.Duration(rng.Int64N(int64(max/time.Microsecond))) * time.Microsecond
	}
	for i := range steps {
		key := prefix + strconv.Itoa(rng.IntN(3))
		switch op := rng.IntN(20); {
		case op < 2:
			now = now.Add(micros(40 * time.Second))
		case op < 3:
			now = end(0) // exactly onto a window's end: deadlines of TTL = End − now
		case op < 10:
			w := federation.Window{End: end(rng.IntN(4) - 2)} // two stale, the current, the next
			switch rng.IntN(4) {
			case 0: // join only
			case 1:
				w.TTL = micros(90 * time.Second)
			default:
				w.TTL = max(w.End.Sub(now), 0)
			}
			n := 1 + rng.Int64N(8)
			a, errA := want.Refill(ctx, key, n, w, now)
			b, errB := got.Refill(ctx, key, n, w, now)
			if errA != nil || errB != nil || a != b {
				t.Fatalf("seed %d step %d: Refill(%s, %d, %v TTL %v) at %v: want %d (%v), got %d (%v)", seed, i, key, n, w.End, w.TTL, now, a, errA, b, errB)
			}
		case op < 17:
			lo := 1 + rng.Int64N(4)
			hi := lo + rng.Int64N(6)
			a, errA := want.Take(ctx, key, lo, hi, now)
			b, errB := got.Take(ctx, key, lo, hi, now)
			if errA != nil || errB != nil || !sameHeld(a, b) {
				t.Fatalf("seed %d step %d: Take(%s, %d..%d) at %v:\nwant %+v (%v)\ngot  %+v (%v)", seed, i, key, lo, hi, now, a, errA, b, errB)
			}
		default:
			we := end(rng.IntN(4) - 2)
			a, errA := want.Release(ctx, key, we, now)
			b, errB := got.Release(ctx, key, we, now)
			if errA != nil || errB != nil || a != b {
				t.Fatalf("seed %d step %d: Release(%s, %v) at %v: want %d (%v), got %d (%v)", seed, i, key, we, now, a, errA, b, errB)
			}
		}
	}
}

func sameHeld(a, b federation.Held) bool {
	return a.Granted == b.Granted && a.Balance == b.Balance && a.Window.End.Equal(b.Window.End) &&
		a.Window.TTL == b.Window.TTL && a.Dead.Equal(b.Dead)
}

// TestEscrowKeyLayout: one hash per key, Prefix{key}, of we, dl and n, which
// Redis forgets a grace after the balance dies; a release deletes it.
func TestEscrowKeyLayout(t *testing.T) {
	e, srv := newEscrow(t, redisfed.EscrowOptions{Prefix: "r1:"})
	rc := srv.Client()
	now := storetest.Timeline().Add(1500 * time.Microsecond)
	cases := []struct {
		name string
		ttl  time.Duration
		keep time.Duration // the key's time to live in Redis
	}{
		{"short TTL: a grace of EscrowGrace", 10 * time.Millisecond, 10*time.Millisecond + redisfed.EscrowGrace},
		{"long TTL: a grace of one TTL", time.Hour, 2 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The key's expiry is judged against Redis's TIME read around
			// the refill; a run the expiry crossed (the key may be gone)
			// cannot be judged, and is made again on another key.
			for attempt := 0; ; attempt++ {
				key := fmt.Sprintf("a{b}%s/%d", tc.name, attempt)
				name := e.Key(key)
				if name != "r1:{"+key+"}" {
					t.Fatalf("Key = %q", name)
				}
				w := federation.Window{End: now.Add(time.Minute), TTL: tc.ttl}
				before := testenv.ServerTime(t, rc)
				if n, err := e.Refill(ctx, key, 7, w, now); err != nil || n != 7 {
					t.Fatalf("refill: %d, %v", n, err)
				}
				after := testenv.ServerTime(t, rc)
				// Redis expires it keep after the refill's script ran, to
				// the millisecond of the script's clock.
				lo, hi := before.Truncate(time.Millisecond).Add(tc.keep), after.Truncate(time.Millisecond).Add(tc.keep)
				if _, err := e.Take(ctx, key, 2, 2, now); err != nil {
					t.Fatal(err)
				}
				h, herr := rc.HGetAll(ctx, name).Result()
				expires, xerr := rc.PExpireTime(ctx, name).Result()
				if last := testenv.ServerTime(t, rc); !last.Before(lo) && attempt == 0 {
					t.Logf("the key's time to live may have ended during the run (Redis's TIME %v): again", last)
					continue
				}
				if herr != nil {
					t.Fatal(herr)
				}
				want := map[string]string{"we": fmt.Sprint(w.End.UnixMicro()), "dl": fmt.Sprint(now.Add(tc.ttl).UnixMicro()), "n": "5"}
				if fmt.Sprint(h) != fmt.Sprint(want) {
					t.Fatalf("hash = %v, want %v", h, want)
				}
				if at := time.Unix(0, int64(expires)); xerr != nil || at.Before(lo) || at.After(hi) {
					t.Fatalf("the key expires at %v (%v), want %v after the refill: %v to %v (Redis's TIME read around it)", time.Unix(0, int64(expires)), xerr, tc.keep, lo, hi)
				}
				if n, err := e.Release(ctx, key, w.End, now); err != nil || n != 5 {
					t.Fatalf("release: %d, %v", n, err)
				}
				if n := rc.Exists(ctx, name).Val(); n != 0 {
					t.Fatal("a released balance is still stored")
				}
				return
			}
		})
	}
	// A dead balance with no units left is forgotten by the take that finds it.
	w := federation.Window{End: now.Add(time.Minute), TTL: time.Minute}
	if _, err := e.Refill(ctx, "empty", 2, w, now); err != nil {
		t.Fatal(err)
	}
	if h, _ := e.Take(ctx, "empty", 2, 2, now); h.Granted != 2 {
		t.Fatalf("take: %+v", h)
	}
	if h, _ := e.Take(ctx, "empty", 1, 1, now.Add(time.Minute)); h.Granted != 0 || !h.Dead.IsZero() || !h.Now.Equal(now.Add(time.Minute)) {
		t.Fatalf("take of a dead empty balance: %+v, want the zero Held", h)
	}
	if n := rc.Exists(ctx, e.Key("empty")).Val(); n != 0 {
		t.Fatal("a dead empty balance is still stored")
	}
}

// TestEscrowServerTime: under ServerTime a balance's deadline is Redis's
// TIME + TTL at the refill, judged against TIME, whatever now callers pass.
// Judged against Redis's TIME read around each call.
func TestEscrowServerTime(t *testing.T) {
	e, srv := newEscrow(t, redisfed.EscrowOptions{ServerTime: true})
	rc := srv.Client()
	bogus := time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
	future := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	before := testenv.ServerTime(t, rc)
	w := federation.Window{End: before.Add(time.Hour).Truncate(time.Second), TTL: time.Minute}
	if n, err := e.Refill(ctx, "st", 5, w, bogus); err != nil || n != 5 {
		t.Fatalf("refill at a bogus now: %d, %v", n, err)
	}
	after := testenv.ServerTime(t, rc)
	dl, err := rc.HGet(ctx, e.Key("st"), "dl").Int64()
	if err != nil || dl < before.Add(w.TTL).UnixMicro() || dl > after.Add(w.TTL).UnixMicro() {
		t.Fatalf("deadline %v (%v), want Redis's TIME at the refill plus a minute (TIME read %v before it, %v after)", time.UnixMicro(dl), err, before, after)
	}
	deadline := time.UnixMicro(dl)
	before = testenv.ServerTime(t, rc)
	h, err := e.Take(ctx, "st", 1, 2, future)
	after = testenv.ServerTime(t, rc)
	if err != nil || h.Granted != 2 || h.Balance != 3 || !h.Window.End.Equal(w.End) || h.Window.TTL < deadline.Sub(after) || h.Window.TTL > deadline.Sub(before) {
		t.Fatalf("take at a bogus future now: %+v, %v; want 2 of 5, a TTL of %v to %v (the deadline less Redis's TIME read around the take)", h, err, deadline.Sub(after), deadline.Sub(before))
	}
	// A microsecond to live: dead once Redis's clock has passed it, though
	// the callers' now stands still in 1999.
	w2 := federation.Window{End: w.End.Add(time.Hour), TTL: time.Microsecond}
	if n, err := e.Refill(ctx, "st", 4, w2, bogus); err != nil || n != 4 {
		t.Fatalf("refill of the next window: %d, %v", n, err)
	}
	dl2, err := rc.HGet(ctx, e.Key("st"), "dl").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if !testenv.EventuallyWithin(testenv.StoreDeadline, func() bool { return testenv.ServerTime(t, rc).UnixMicro() > dl2 }) {
		t.Fatalf("Redis's clock never passed the deadline %v", time.UnixMicro(dl2))
	}
	if h, err := e.Take(ctx, "st", 1, 1, bogus); err != nil || h.Granted != 0 || !h.Dead.Equal(w2.End) {
		t.Fatalf("take after the deadline on Redis's clock: %+v, %v; want the dead balance named", h, err)
	}
	if n, err := e.Release(ctx, "st", w2.End, bogus); err != nil || n != 4 {
		t.Fatalf("release: %d, %v; want 4", n, err)
	}
}

func TestNewEscrowRejectsBadOptions(t *testing.T) {
	if _, err := redisfed.NewEscrow(nil, redisfed.EscrowOptions{}); err == nil {
		t.Error("NewEscrow(nil client) succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // no I/O: NewEscrow sends nothing
	defer c.Close()
	if _, err := redisfed.NewEscrow(c, redisfed.EscrowOptions{Timeout: -time.Second}); err == nil {
		t.Error("NewEscrow with a negative timeout succeeded")
	}
}

// TestEscrowTimeRange: instants the scripts cannot represent exactly are
// refused; a release of such a window finds nothing.
func TestEscrowTimeRange(t *testing.T) {
	e, _ := newEscrow(t, redisfed.EscrowOptions{})
	now := storetest.Timeline()
	w := federation.Window{End: now.Add(time.Minute), TTL: time.Minute}
	if _, err := e.Take(ctx, "k", 1, 1, time.Unix(-1, 0)); !errors.Is(err, redisstore.ErrTimeRange) {
		t.Errorf("Take before 1970: %v, want ErrTimeRange", err)
	}
	if _, err := e.Refill(ctx, "k", 1, w, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)); !errors.Is(err, redisstore.ErrTimeRange) {
		t.Errorf("Refill in 2300: %v, want ErrTimeRange", err)
	}
	if _, err := e.Refill(ctx, "k", 1, federation.Window{End: w.End, TTL: 250 * 365 * 24 * time.Hour}, now); !errors.Is(err, redisstore.ErrTimeRange) {
		t.Errorf("Refill living 250 years: %v, want ErrTimeRange", err)
	}
	if n, err := e.Release(ctx, "k", time.Time{}, now); n != 0 || err != nil {
		t.Errorf("Release of the zero window: %d, %v", n, err)
	}
}
