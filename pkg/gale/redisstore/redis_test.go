package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttlekit/throttlekit/internal/testenv"
	"github.com/throttlekit/throttlekit/pkg/gale"
	"github.com/throttlekit/throttlekit/pkg/gale/memstore"
	"github.com/throttlekit/throttlekit/pkg/gale/redisstore"
	"github.com/throttlekit/throttlekit/pkg/gale/storetest"
)

var (
	ctx    = context.Background()
	minute = gale.Rule{Algorithm: gale.FixedWindow, Limit: 100, Period: time.Minute}
)

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := redisstore.New(nil, redisstore.Options{}); err == nil {
		t.Error("New(nil client) succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisstore.Options{{MaxBatch: -1}, {MaxBatch: 1 << 20}, {Pipelines: -1}, {Pipelines: 1 << 20}, {Timeout: -time.Second}} {
		if _, err := redisstore.New(c, o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// TestKeyLayout: one hash per key, named Prefix{key}, holding the State
// fields, expiring at ExpireAt rounded up to the millisecond.
func TestKeyLayout(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{Prefix: "app:"})
	c := srv.Client()
	now := timeline().Add(1500 * us)
	r := gale.Rule{Algorithm: gale.TokenBucket, Limit: 3, Period: time.Second}
	if _, err := s.Check(ctx, "a{b}c", r, 1, now); err != nil {
		t.Fatal(err)
	}
	if got := s.Key("a{b}c"); got != "app:{a{b}c}" {
		t.Fatalf("Key = %q", got)
	}
	h, err := c.HGetAll(ctx, "app:{a{b}c}").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Refilled = now, 2 tokens left; full again 1/3 s later, rounded up to
	// the µs: ExpireAt = now + 333334µs.
	want := map[string]string{"w": "0", "c": "0", "p": "0", "t": "0", "r": "0", "k": "2", "u": fmt.Sprint(now.UnixMicro()),
		"x": fmt.Sprint(now.UnixMicro() + 333334)}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("hash = %v, want %v", h, want)
	}
	exp, err := c.Do(ctx, "PEXPIRETIME", "app:{a{b}c}").Int64()
	if err != nil {
		t.Fatal(err)
	}
	if wantMS := (now.UnixMicro() + 333334 + 999) / 1000; exp != wantMS {
		t.Fatalf("expires at %d ms, want %d", exp, wantMS)
	}
	// A denial writes nothing, nor does a Return that changes nothing.
	writes := func() int64 {
		t.Helper()
		calls, err := srv.CommandCalls(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return calls["hset"]
	}
	w0 := writes()
	if d, _ := s.Check(ctx, "a{b}c", r, 3, now); d.Allowed {
		t.Fatal("cost 3 with 2 tokens allowed")
	}
	if w := writes(); w != w0 {
		t.Fatalf("a denial wrote (%d HSETs)", w-w0)
	}
	for i := 1; i <= 2; i++ { // the first fills the bucket; the second changes nothing
		if err := s.Return(ctx, "a{b}c", r, 1, time.Time{}, now); err != nil {
			t.Fatal(err)
		}
		if w := writes(); w != w0+1 {
			t.Fatalf("after return %d: %d HSETs in all, want 1", i, w-w0)
		}
	}
	if k := c.HGet(ctx, "app:{a{b}c}", "k").Val(); k != "3" {
		t.Fatalf("tokens %q after returning 1 of 2 taken, want 3", k)
	}
}

// TestExpiredStateIsZero: from its ExpireAt on, a state answers as the zero
// State even where Redis has not expired it yet and another rule reads it
// (the memory store forgets it then).
func TestExpiredStateIsZero(t *testing.T) {
	s, _ := newStore(t, redisstore.Options{})
	ref := memstore.New()
	fixed := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Minute}
	sliding := gale.Rule{Algorithm: gale.SlidingWindow, Limit: 10, Period: time.Minute}
	t0 := timeline()
	for _, st := range []gale.Store{ref, s} {
		if _, err := st.Check(ctx, "k", fixed, 8, t0); err != nil {
			t.Fatal(err)
		}
	}
	// At t0+1m the fixed window's state has expired; read as a sliding
	// window it would be the previous window's 8.
	a, _ := ref.Check(ctx, "k", sliding, 5, t0.Add(time.Minute))
	b, err := s.Check(ctx, "k", sliding, 5, t0.Add(time.Minute))
	if err != nil || !storetest.SameDecision(a, b) || !b.Allowed {
		t.Fatalf("memory %+v, redis %+v (%v)", a, b, err)
	}
}

// TestServerTime: under ServerTime the scripts use Redis's clock, and the
// now passed in is ignored. Judged against Redis's TIME read around the
// calls; a run the hour's end crossed (its window ended between the calls)
// cannot be judged, and is made again on another key.
func TestServerTime(t *testing.T) {
	s, srv := newStore(t, redisstore.Options{ServerTime: true})
	c := srv.Client()
	hour := gale.Rule{Algorithm: gale.FixedWindow, Limit: 10, Period: time.Hour}
	bogus := time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)
	for attempt := 0; ; attempt++ {
		key := fmt.Sprint("st-", attempt)
		before := testenv.ServerTime(t, c)
		g, err := s.Lease(ctx, key, hour, 1, 4, bogus)
		after := testenv.ServerTime(t, c)
		if err != nil {
			t.Fatal(err)
		}
		if g.Now.Before(before) || g.Now.After(after) {
			t.Fatalf("Grant.Now %v is not the server's time (TIME read %v before the lease, %v after)", g.Now, before, after)
		}
		if end := g.Now.Truncate(time.Hour).Add(time.Hour); !g.WindowEnd.Equal(end) || !g.Decision.ResetAt.Equal(end) {
			t.Fatalf("window end %v, reset %v, want %v", g.WindowEnd, g.Decision.ResetAt, end)
		}
		// The passed-in time is ignored, even out of range.
		d, err := s.Check(ctx, key, hour, 6, time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Return(ctx, key, hour, 2, g.WindowEnd, bogus); err != nil {
			t.Fatal(err)
		}
		d2, err := s.Check(ctx, key, hour, 2, bogus)
		if err != nil {
			t.Fatal(err)
		}
		if last := testenv.ServerTime(t, c); !last.Before(g.WindowEnd) && attempt == 0 {
			t.Logf("Redis's hour ended during the run (%v): again", last)
			continue
		}
		if !d.Allowed || d.Remaining != 0 {
			t.Fatalf("check 6 after leasing 4 of 10: %+v", d)
		}
		if !d2.Allowed {
			t.Fatalf("returned credits not taken again: %+v", d2)
		}
		return
	}
}

// TestTimeRange: instants the scripts cannot represent are refused.
func TestTimeRange(t *testing.T) {
	s, _ := newStore(t, redisstore.Options{})
	for _, at := range []time.Time{{}, time.Date(2255, 7, 1, 0, 0, 0, 0, time.UTC), time.Unix(-1, 0)} {
		if _, err := s.Check(ctx, "k", minute, 1, at); !errors.Is(err, redisstore.ErrTimeRange) {
			t.Errorf("Check at %v: %v", at, err)
		}
	}
	if err := s.Return(ctx, "k", minute, 1, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), timeline()); !errors.Is(err, redisstore.ErrTimeRange) {
		t.Errorf("Return into 2300: %v", err)
	}
}
