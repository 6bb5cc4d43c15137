package redisfed_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/federation"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/federationtest"
	"github.com/throttlekit/throttlekit/pkg/gale/federation/redisfed"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

var ctx = context.Background()

// newCoordinator starts a Redis server for t and returns a Coordinator on
// it, closed at the end of the test. A zero opts.Timeout is StoreDeadline:
// no test of it times a round trip.
func newCoordinator(t testing.TB, opts redisstore.Options) (*redisfed.Coordinator, *testenv.Redis) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = testenv.StoreDeadline
	}
	srv := testenv.StartRedis(t)
	c, err := redisfed.NewCoordinator(srv.Client(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, srv
}

func TestCoordinatorConformance(t *testing.T) {
	c, _ := newCoordinator(t, redisstore.Options{})
	federationtest.RunCoordinator(t, func(*testing.T) federation.Coordinator { return c })
}

// TestCoordinatorDifferential: the memory coordinator and the Redis one,
// step for step on random schedules of leases, reconciles and clock steps.
func TestCoordinatorDifferential(t *testing.T) {
	c, _ := newCoordinator(t, redisstore.Options{})
	for seed := range uint64(5) {
		federationtest.DifferentialCoordinator(t, seed, 3000, federation.NewMemoryCoordinator(nil), c)
	}
}

// TestCoordinatorOn: a coordinator on the caller's store leases into the
// store's state hash, and Close leaves the store open.
func TestCoordinatorOn(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := redisfed.CoordinatorOn(s)
	now := storetest.Timeline()
	if g, err := c.Lease(ctx, "k", perMinute, 4, 4, now); err != nil || g.Granted != 4 {
		t.Fatalf("lease: %+v, %v", g, err)
	}
	_ = c.Close()
	if d, err := s.Check(ctx, "k", perMinute, 6, now); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("store check of 6 after the coordinator leased 4 of 10: %+v, %v", d, err)
	}
}

var perMinute = gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}

// TestCoordinatorKeyLayout: the budget is the store's hash, expiring at the
// window's end (the load-bearing expiry); a reconcile's marker lapses then
// too, and shares the budget's Redis Cluster slot whatever the key.
func TestCoordinatorKeyLayout(t *testing.T) {
	srv := testenv.StartRedis(t)
	s, err := redisstore.New(srv.Client(), redisstore.Options{Timeout: testenv.StoreDeadline})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, rc := redisfed.CoordinatorOn(s), srv.Client()
	now := storetest.Timeline().Add(10 * time.Second)
	for _, key := range []string{"plain", "a{b}c", "{x}", "a}b{", "3:eu{", "x}"} {
		g, err := c.Lease(ctx, key, perMinute, 3, 3, now)
		if err != nil || g.Granted != 3 {
			t.Fatalf("%q: lease %+v, %v", key, g, err)
		}
		if got, err := c.Reconcile(ctx, key, perMinute, federation.Reconcile{Leftover: 1, WindowEnd: g.WindowEnd, Token: "eu}", Now: now}); err != nil || got != federation.Applied {
			t.Fatalf("%q: reconcile %v, %v", key, got, err)
		}
		budget, marker := s.Key(key), s.OnceKey(key, g.WindowEnd, "eu}")
		if want := "tk:{" + key + "}"; budget != want {
			t.Fatalf("budget %q, want %q", budget, want)
		}
		if !strings.HasPrefix(marker, budget+":once:") {
			t.Fatalf("marker %q does not start with its budget's name %q", marker, budget)
		}
		if a, b := keySlot(budget), keySlot(marker); a != b {
			t.Fatalf("%q: budget %q in slot %d, marker %q in slot %d", key, budget, a, marker, b)
		}
		for _, name := range []string{budget, marker} {
			exp, err := rc.Do(ctx, "PEXPIRETIME", name).Int64()
			if err != nil || exp != g.WindowEnd.UnixMilli() {
				t.Fatalf("%q expires at %d ms (%v), want the window end %d", name, exp, err, g.WindowEnd.UnixMilli())
			}
		}
	}
}

// keySlot is Redis Cluster's HASH_SLOT: CRC16 (XMODEM) of the key's hash
// tag, or of the whole key when it has none, mod 16384.
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TestKeySlot checks keySlot against the Redis Cluster specification's
// examples.
func TestKeySlot(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, same := range [][2]string{{"{user1000}.following", "{user1000}.followers"}, {"foo{{bar}}zap", "{bar"}, {"foo{bar}{zap}", "bar"}} {
		if keySlot(same[0]) != keySlot(same[1]) {
			t.Errorf("%q and %q in different slots", same[0], same[1])
		}
	}
	if keySlot("foo{}{bar}") != crc16("foo{}{bar}")%16384 {
		t.Error("an empty hash tag must hash the whole key")
	}
}

// TestReconcileTokens: tokens are arbitrary bytes; hostile ones (braces,
// colons, hex look-alikes, the longest, binary) never share a marker, so
// two different tokens of one window are both applied.
func TestReconcileTokens(t *testing.T) {
	c, _ := newCoordinator(t, redisstore.Options{})
	long := strings.Repeat("x", federation.MaxToken)
	pairs := [][2]string{
		{"a}b", "a"},
		{":", "::"},
		{"eu", "6575"}, // "6575" is "eu" in hex
		{"a:once:1:62", "a"},
		{long, long[:federation.MaxToken-1]},
		{"\x00", "\x00\x00"},
		{"\xff\xfe}", "\xff\xfe"},
		{"}", "{"},
	}
	now := storetest.Timeline()
	for i, p := range pairs {
		key := fmt.Sprintf("tokens/%d", i)
		g, err := c.Lease(ctx, key, perMinute, 10, 10, now)
		if err != nil || g.Granted != 10 {
			t.Fatalf("lease: %+v, %v", g, err)
		}
		for _, tok := range p {
			rec := federation.Reconcile{Leftover: 2, WindowEnd: g.WindowEnd, Token: tok, Now: now}
			if got, err := c.Reconcile(ctx, key, perMinute, rec); err != nil || got != federation.Applied {
				t.Fatalf("tokens %q: reconcile of %q: %v, %v, want applied", p, tok, got, err)
			}
		}
		if g, _ := c.Lease(ctx, key, perMinute, 1, 10, now); g.Granted != 4 {
			t.Fatalf("tokens %q: after two reconciles of 2 the window grants %d, want 4", p, g.Granted)
		}
	}
	rec := federation.Reconcile{Leftover: 1, WindowEnd: now.Add(time.Minute), Token: long + "y", Now: now}
	if _, err := c.Reconcile(ctx, "tokens/long", perMinute, rec); err == nil {
		t.Fatal("a token over MaxToken was accepted")
	}
}

// TestCoordinatorServerTime: under ServerTime the coordinator is on Redis's
// clock: Grant.Now is Redis's time, the granted units live until the window
// ends on it, and a reconcile's window is judged on it, whatever now the
// caller passes. Judged against Redis's TIME read around the lease; a run
// the hour's end crossed (its window ended between the calls) cannot be
// judged, and is made again on another key.
func TestCoordinatorServerTime(t *testing.T) {
	c, srv := newCoordinator(t, redisstore.Options{ServerTime: true})
	rc := srv.Client()
	hour := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Hour}
	bogus := time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
	future := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	for attempt := 0; ; attempt++ {
		key := fmt.Sprint("st-", attempt)
		before := testenv.ServerTime(t, rc)
		g, err := c.Lease(ctx, key, hour, 6, 6, bogus)
		after := testenv.ServerTime(t, rc)
		if err != nil || g.Granted != 6 {
			t.Fatalf("lease: %+v, %v", g, err)
		}
		if g.Now.Before(before) || g.Now.After(after) {
			t.Fatalf("Grant.Now %v is not Redis's time (TIME read %v before the lease, %v after)", g.Now, before, after)
		}
		if end := g.Now.Truncate(time.Hour).Add(time.Hour); !g.WindowEnd.Equal(end) {
			t.Fatalf("window end %v, want %v", g.WindowEnd, end)
		}
		if live := g.WindowEnd.Sub(g.Now); live <= 0 || live > time.Hour {
			t.Fatalf("units live %v", live)
		}
		// A caller's now after the window's end does not expire a
		// reconcile, nor one before it make a past window live.
		rec := federation.Reconcile{Leftover: 4, WindowEnd: g.WindowEnd, Token: "eu", Now: future}
		applied, aerr := c.Reconcile(ctx, key, hour, rec)
		past := federation.Reconcile{Leftover: 4, WindowEnd: g.WindowEnd.Add(-time.Hour), Token: "eu", Now: bogus}
		expired, eerr := c.Reconcile(ctx, key, hour, past)
		left, lerr := c.Lease(ctx, key, hour, 1, 10, bogus)
		if last := testenv.ServerTime(t, rc); !last.Before(g.WindowEnd) && attempt == 0 {
			t.Logf("Redis's hour ended during the run (%v): again", last)
			continue
		}
		if aerr != nil || applied != federation.Applied {
			t.Fatalf("reconcile at a bogus future now: %v, %v, want applied", applied, aerr)
		}
		if eerr != nil || expired != federation.Expired {
			t.Fatalf("reconcile of the previous window at a bogus past now: %v, %v, want expired", expired, eerr)
		}
		if lerr != nil || left.Granted != 8 {
			t.Fatalf("after leasing 6 and reconciling 4 the window grants %d (%v), want 8", left.Granted, lerr)
		}
		return
	}
}
